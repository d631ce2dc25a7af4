"""What moves where in a collective: pure functions over chunk tuples, no Dask, no I/O.

A *piece* is the overlap of one input block with one output block: the slices to read
from the input and to write into the output. Every worker computes the same pieces from
the same chunks, so the plan itself never travels, only who holds which input block and
who owns which output block.

Examples
--------
>>> ps = pieces(((4, 4),), ((2, 6),))
>>> [(p.src_block, p.dst_block, p.shape) for p in ps]
[((0,), (0,), (2,)), ((0,), (1,), (2,)), ((1,), (1,), (4,))]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod
from typing import Any

__all__ = ["Context", "Piece", "pieces", "overlaps", "assign_owners", "block_grid", "row_panels"]


@dataclass(frozen=True)
class Context:
    """One rank's view of an operation: who it is, who holds and owns what, its input
    blocks, the transport to its peers and the array module of its chunks."""

    rank: int
    ranks: int
    holders: dict
    owners: dict
    inputs: dict
    transport: Any
    xp: Any


@dataclass(frozen=True)
class Piece:
    """One input block's share of one output block.

    ``src`` slices the input block, ``dst`` the output block; both have ``shape``.
    """

    src_block: tuple
    dst_block: tuple
    src: tuple
    dst: tuple
    shape: tuple

    @property
    def size(self) -> int:
        return prod(self.shape)


def _starts(chunks: tuple) -> list[int]:
    return list(itertools.accumulate((0,) + tuple(chunks)))


def overlaps(old: tuple, new: tuple) -> list[tuple[int, int, int, int]]:
    """Overlaps of two chunkings of one axis: ``(old index, new index, start, stop)`` in
    global coordinates, in order.

    >>> overlaps((3, 3), (2, 4))
    [(0, 0, 0, 2), (0, 1, 2, 3), (1, 1, 3, 6)]
    """
    if sum(old) != sum(new):
        raise ValueError(f"chunks {old} and {new} cover different lengths ({sum(old)} != {sum(new)})")
    a, b = _starts(old), _starts(new)
    out, i, j = [], 0, 0
    while i < len(old) and j < len(new):
        lo, hi = max(a[i], b[j]), min(a[i + 1], b[j + 1])
        if hi > lo:
            out.append((i, j, lo, hi))
        if a[i + 1] <= b[j + 1]:
            i += 1
        else:
            j += 1
    return out


def pieces(old: tuple, new: tuple) -> list[Piece]:
    """The pieces of a rechunk from chunks ``old`` to ``new`` (tuples of per-axis chunk
    tuples), in a fixed order every worker agrees on.
    """
    if len(old) != len(new):
        raise ValueError(f"chunks of {len(old)} and {len(new)} dimensions")
    a_starts = [_starts(c) for c in old]
    b_starts = [_starts(c) for c in new]
    out = []
    for combo in itertools.product(*(overlaps(o, n) for o, n in zip(old, new))):
        src_block = tuple(c[0] for c in combo)
        dst_block = tuple(c[1] for c in combo)
        src = tuple(slice(lo - a_starts[d][i], hi - a_starts[d][i])
                    for d, (i, _, lo, hi) in enumerate(combo))
        dst = tuple(slice(lo - b_starts[d][j], hi - b_starts[d][j])
                    for d, (_, j, lo, hi) in enumerate(combo))
        out.append(Piece(src_block, dst_block, src, dst, tuple(hi - lo for _, _, lo, hi in combo)))
    return out


def block_grid(chunks: tuple) -> list[tuple]:
    """Every block index of a chunking, in C order.

    >>> block_grid(((1, 1), (2,)))
    [(0, 0), (1, 0)]
    """
    return list(itertools.product(*(range(len(c)) for c in chunks)))


def assign_owners(plan: list[Piece], holders: dict, out_blocks: list[tuple], ranks: int) -> dict:
    """Owner rank of each output block: the rank holding most of its elements already, as
    long as no rank gets more than its fair share (``ceil(blocks / ranks)``) of blocks.

    ``holders`` maps input block -> rank. Larger output blocks choose first, so the
    balance cap bites on the small ones.

    >>> p = pieces(((2, 2),), ((2, 2),))
    >>> assign_owners(p, {(0,): 1, (1,): 0}, [(0,), (1,)], 2)
    {(0,): 1, (1,): 0}
    """
    local: dict = {b: [0] * ranks for b in out_blocks}
    sizes: dict = {b: 0 for b in out_blocks}
    for p in plan:
        local[p.dst_block][holders[p.src_block]] += p.size
        sizes[p.dst_block] += p.size
    cap = -(-len(out_blocks) // ranks)
    load = [0] * ranks
    owners = {}
    for block in sorted(out_blocks, key=lambda b: -sizes[b]):
        order = sorted(range(ranks), key=lambda r: (-local[block][r], load[r], r))
        rank = next(r for r in order if load[r] < cap)
        owners[block] = rank
        load[rank] += 1
    return {b: owners[b] for b in out_blocks}


def row_panels(row_chunks: tuple, ranks: int) -> list[int]:
    """Rank of each row chunk when rows are split into ``ranks`` contiguous panels of about
    equal height (a rank may get none when there are fewer chunks than ranks).

    >>> row_panels((10, 10, 10, 10), 2)
    [0, 0, 1, 1]
    >>> row_panels((5, 5, 5), 4)
    [0, 2, 3]
    """
    total = sum(row_chunks) or 1
    out, start = [], 0
    for c in row_chunks:
        middle = start + c / 2
        out.append(min(ranks - 1, int(middle * ranks / total)))
        start += c
    return out
