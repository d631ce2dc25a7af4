"""The collective operations: what each rank sends, expects and computes.

An operation is a plain, msgpack-able description (``spec``) that every rank turns into
the same :class:`~hpcgpu.array.plane.plan.Piece` lists, so nothing but the spec, who
holds which input block (``holders``) and who owns which output block (``owners``)
travels. ``run`` is called on every rank with its local input blocks and a transport, and
returns the output blocks this rank owns.

Inputs are keyed ``(input number, block index)``; outputs by block index.
"""

from __future__ import annotations

import numpy as np

from hpcgpu.array.plane.plan import Context, assign_owners, block_grid, pieces, row_panels
from hpcgpu.array.plane.sorting import Sort
from hpcgpu.array.plane.tsqr import TallSkinny

__all__ = ["Context", "operation", "Rechunk", "Transpose", "Matmul"]


def _shape(chunks: tuple, block: tuple) -> tuple:
    return tuple(c[i] for c, i in zip(chunks, block))


def _tuplify(chunks) -> tuple:
    return tuple(tuple(int(c) for c in axis) for axis in chunks)


class _Exchange:
    """Sends and expected receives of one rank, with the pieces each receive fills."""

    def __init__(self, ranks: int):
        self.sends = {p: [] for p in range(ranks)}
        self.expect = {p: [] for p in range(ranks)}
        self.fills = {p: [] for p in range(ranks)}

    def run(self, transport, xp) -> list:
        """(target, value) pairs of every piece received."""
        got = transport.exchange(self.sends, self.expect)
        return [(fill, xp.asarray(a)) for p, arrays in got.items()
                for fill, a in zip(self.fills[p], arrays)]


class Rechunk:
    """Input 0 with chunks ``old`` becomes the same array with chunks ``new``."""

    kind = "rechunk"
    spread = True  # every running worker owns output blocks

    def __init__(self, old, new, dtype):
        self.old, self.new, self.dtype = _tuplify(old), _tuplify(new), np.dtype(dtype)
        self.plan = pieces(self.old, self.new)

    def spec(self) -> dict:
        return {"kind": self.kind, "old": self.old, "new": self.new, "dtype": self.dtype.str}

    def out_blocks(self) -> list:
        return block_grid(self.new)

    def owners(self, holders: dict, ranks: int) -> dict:
        by_block = {b: r for (_, b), r in holders.items()}
        return assign_owners(self.plan, by_block, self.out_blocks(), ranks)

    def run(self, ctx: Context) -> dict:
        ex, local = _Exchange(ctx.ranks), []
        for pc in self.plan:
            src, dst = ctx.holders[(0, pc.src_block)], ctx.owners[pc.dst_block]
            if src == ctx.rank and dst == ctx.rank:
                local.append((pc, ctx.inputs[(0, pc.src_block)][pc.src]))
            elif src == ctx.rank:
                ex.sends[dst].append(ctx.inputs[(0, pc.src_block)][pc.src])
            elif dst == ctx.rank:
                ex.expect[src].append((pc.shape, self.dtype.str))
                ex.fills[src].append(pc)
        outputs = {b: ctx.xp.empty(_shape(self.new, b), dtype=self.dtype)
                   for b, r in ctx.owners.items() if r == ctx.rank}
        for pc, value in local + ex.run(ctx.transport, ctx.xp):
            outputs[pc.dst_block][pc.dst] = value
        return outputs


class Transpose:
    """Input 0 transposed by ``axes``; output block ``b`` goes to the rank holding input
    block ``b`` where there is one, so that ``x + x.T`` adds blocks already side by side."""

    kind = "transpose"

    def __init__(self, chunks, axes, dtype):
        self.chunks, self.axes, self.dtype = _tuplify(chunks), tuple(axes), np.dtype(dtype)
        self.new = tuple(self.chunks[a] for a in self.axes)

    def spec(self) -> dict:
        return {"kind": self.kind, "chunks": self.chunks, "axes": self.axes, "dtype": self.dtype.str}

    def out_blocks(self) -> list:
        return block_grid(self.new)

    def source(self, block: tuple) -> tuple:
        src = [0] * len(block)
        for out_axis, in_axis in enumerate(self.axes):
            src[in_axis] = block[out_axis]
        return tuple(src)

    def owners(self, holders: dict, ranks: int) -> dict:
        return {b: holders.get((0, b), holders[(0, self.source(b))]) for b in self.out_blocks()}

    def run(self, ctx: Context) -> dict:
        ex, outputs = _Exchange(ctx.ranks), {}
        for b in self.out_blocks():
            src, dst = ctx.holders[(0, self.source(b))], ctx.owners[b]
            if src == ctx.rank:
                block = ctx.xp.ascontiguousarray(ctx.inputs[(0, self.source(b))].transpose(self.axes))
                if dst == ctx.rank:
                    outputs[b] = block
                else:
                    ex.sends[dst].append(block)
            elif dst == ctx.rank:
                ex.expect[src].append((_shape(self.new, b), self.dtype.str))
                ex.fills[src].append(b)
        for b, value in ex.run(ctx.transport, ctx.xp):
            outputs[b] = value
        return outputs


class Matmul:
    """``a @ b`` for 2-D inputs 0 (``a``) and 1 (``b``) whose inner chunks agree.

    Row panels of ``a`` (whole rows of blocks) go to one rank each, every rank that owns a
    panel receives all of ``b``, and each multiplies its panel in one call to the BLAS
    (cuBLAS on a GPU): one exchange and one large product per rank instead of a task per
    block product and a tree of sums. Needs room for ``b`` whole on every rank.
    """

    kind = "matmul"
    spread = True  # every running worker multiplies a panel

    def __init__(self, a_chunks, b_chunks, dtype):
        self.a, self.b, self.dtype = _tuplify(a_chunks), _tuplify(b_chunks), np.dtype(dtype)
        if self.a[1] != self.b[0]:
            raise ValueError(f"inner chunks differ: {self.a[1]} and {self.b[0]}; rechunk one first")
        self.new = (self.a[0], self.b[1])

    def spec(self) -> dict:
        return {"kind": self.kind, "a_chunks": self.a, "b_chunks": self.b, "dtype": self.dtype.str}

    def out_blocks(self) -> list:
        return block_grid(self.new)

    def owners(self, holders: dict, ranks: int) -> dict:
        panel = row_panels(self.a[0], ranks)
        return {b: panel[b[0]] for b in self.out_blocks()}

    def run(self, ctx: Context) -> dict:
        panel = row_panels(self.a[0], ctx.ranks)
        mine = [i for i, r in enumerate(panel) if r == ctx.rank]
        takers = sorted(set(panel))
        ex = _Exchange(ctx.ranks)
        rows = [sum(self.a[0][:i]) - sum(self.a[0][:mine[0]]) for i in mine] if mine else []
        a_panel = ctx.xp.empty((sum(self.a[0][i] for i in mine), sum(self.a[1])), self.dtype)
        b_full = ctx.xp.empty((sum(self.b[0]), sum(self.b[1])), self.dtype)
        local = []
        for (which, block), src in sorted(ctx.holders.items()):
            targets = [panel[block[0]]] if which == 0 else takers
            where = self._slot(which, block, mine, rows)
            for dst in targets:
                if src == ctx.rank and dst == ctx.rank:
                    local.append((where, ctx.inputs[(which, block)]))
                elif src == ctx.rank:
                    ex.sends[dst].append(ctx.inputs[(which, block)])
                elif dst == ctx.rank:
                    ex.expect[src].append((_shape(self.a if which == 0 else self.b, block), self.dtype.str))
                    ex.fills[src].append(where)
        for (which, slices), value in local + ex.run(ctx.transport, ctx.xp):
            (a_panel if which == 0 else b_full)[slices] = value
        if not mine:
            return {}
        product = a_panel @ b_full
        return {b: ctx.xp.ascontiguousarray(product[self._out_slices(b, mine, rows)])
                for b, r in ctx.owners.items() if r == ctx.rank}

    def _slot(self, which: int, block: tuple, mine: list, rows: list) -> tuple:
        """Where a received block lands: (0 for the panel / 1 for b, slices)."""
        chunks = self.a if which == 0 else self.b
        col = sum(chunks[1][:block[1]])
        if which == 0:
            top = rows[mine.index(block[0])] if block[0] in mine else 0
        else:
            top = sum(chunks[0][:block[0]])
        return (which, (slice(top, top + chunks[0][block[0]]), slice(col, col + chunks[1][block[1]])))

    def _out_slices(self, block: tuple, mine: list, rows: list) -> tuple:
        top, left = rows[mine.index(block[0])], sum(self.new[1][:block[1]])
        return (slice(top, top + self.new[0][block[0]]), slice(left, left + self.new[1][block[1]]))


def operation(spec: dict):
    """The operation a spec describes (as :meth:`spec` made it, possibly through msgpack)."""
    kind = spec["kind"]
    if kind == "rechunk":
        return Rechunk(spec["old"], spec["new"], spec["dtype"])
    if kind == "transpose":
        return Transpose(spec["chunks"], spec["axes"], spec["dtype"])
    if kind == "matmul":
        return Matmul(spec["a_chunks"], spec["b_chunks"], spec["dtype"])
    if kind == "sort":
        return Sort(spec["chunks"], spec["dtype"], spec["arg"])
    if kind == "tsqr":
        return TallSkinny(spec["chunks"], spec["dtype"], spec["svd"], spec["coerce_signs"])
    raise ValueError(f"unknown collective operation {kind!r}")
