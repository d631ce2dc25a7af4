"""Sort and argsort of a 1-D array on the plane: a sample sort in four exchanges.

Dask has no sort of a chunked axis; its only route is one chunk (one worker's memory and
one GPU's time). Here every rank sorts what it holds, and four exchanges among the
workers that hold the array finish the job:

1. **samples**: each rank sends every other rank evenly spaced values of its sorted data;
   all ranks sort the same samples and so choose the same ``ranks - 1`` splitters;
2. **counts**: each rank tells every other how many of its values fall in each bucket
   (bucket ``d`` holds the values between splitters ``d - 1`` and ``d``; equal values share
   a bucket, so ties never straddle two ranks);
3. **buckets**: bucket ``d`` goes to rank ``d``, which merges what it receives;
4. **blocks**: the buckets, in rank order, are the sorted array; each rank sends the
   parts of its bucket that fall in other ranks' output blocks (the output keeps the
   input's chunks, and output block ``b`` stays where input block ``b`` was).

Argsort carries each value's global index beside it and orders ties by it: the result
equals NumPy's ``argsort(kind="stable")``. NaN sorts last, as in NumPy and CuPy.

Examples
--------
>>> import numpy as np
>>> from hpcgpu.array.plane.sorting import Sort
>>> Sort(((3, 2),), "f8", arg=True).spec()["arg"]
True
"""

from __future__ import annotations

import numpy as np

from hpcgpu.array.plane.plan import Context, block_grid

__all__ = ["Sort", "stable_argsort"]

#: samples per rank and peer: enough that no bucket is far above its share for data that
#: is not made of a few repeated values
OVERSAMPLE = 64


def stable_argsort(xp, a, axis=-1):
    """``argsort`` that keeps equal values in their order (CuPy's always does).

    >>> stable_argsort(np, np.array([2, 1, 2, 1])).tolist()
    [1, 3, 0, 2]
    """
    if xp is np:
        return np.argsort(a, axis=axis, kind="stable")
    return xp.argsort(a, axis=axis)


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _overlap(lo: int, hi: int, start: int, stop: int) -> tuple[int, int]:
    return max(lo, start), min(hi, stop)


class Sort:
    """Input 0, a 1-D array with chunks ``chunks``, sorted (``arg``: the indices that
    sort it); the output has the input's chunks."""

    kind = "sort"

    def __init__(self, chunks, dtype, arg=False):
        self.chunks = tuple(tuple(int(c) for c in axis) for axis in chunks)
        if len(self.chunks) != 1:
            raise ValueError(f"the plane's sort takes a 1-D array, not {len(self.chunks)}-D")
        self.dtype, self.arg, self.new = np.dtype(dtype), bool(arg), self.chunks
        self.starts = np.concatenate([[0], np.cumsum(self.chunks[0])]).astype(np.int64)

    def spec(self) -> dict:
        return {"kind": self.kind, "chunks": self.chunks, "dtype": self.dtype.str, "arg": self.arg}

    def out_blocks(self) -> list:
        return block_grid(self.new)

    def owners(self, holders: dict, ranks: int) -> dict:
        return {b: holders[(0, b)] for b in self.out_blocks()}

    def run(self, ctx: Context) -> dict:
        held = [sorted(b for (_, b), r in ctx.holders.items() if r == rank) for rank in range(ctx.ranks)]
        sizes = [sum(self.chunks[0][b[0]] for b in blocks) for blocks in held]
        values, index = self._local(ctx, held[ctx.rank])
        splitters = self._splitters(ctx, values, sizes)
        cuts = [0, *_host(ctx.xp.searchsorted(values, splitters, side="left")).tolist(), len(values)]
        counts = self._counts(ctx, np.diff(cuts))
        values, index = self._buckets(ctx, values, index, cuts, counts)
        return self._blocks(ctx, index if self.arg else values, counts.sum(axis=0))

    def _local(self, ctx: Context, blocks: list):
        """This rank's values sorted, and their global indices (argsort only, else None)."""
        xp = ctx.xp
        if not blocks:
            return xp.empty(0, self.dtype), (xp.empty(0, np.int64) if self.arg else None)
        values = xp.concatenate([xp.asarray(ctx.inputs[(0, b)]).ravel() for b in blocks])
        if not self.arg:
            return xp.sort(values), None
        index = xp.concatenate([xp.arange(int(self.starts[b[0]]), int(self.starts[b[0] + 1]), dtype=np.int64)
                                for b in blocks])
        order = stable_argsort(xp, values)
        return values[order], index[order]

    def _splitters(self, ctx: Context, values, sizes: list):
        """The same ``ranks - 1`` splitters on every rank, from every rank's samples."""
        xp, me = ctx.xp, ctx.rank
        taken = [min(OVERSAMPLE * ctx.ranks, n) for n in sizes]
        mine = values[xp.asarray((np.arange(taken[me]) * sizes[me]) // max(taken[me], 1))]
        peers = [p for p in range(ctx.ranks) if p != me]
        got = ctx.transport.exchange({p: [mine] if taken[me] else [] for p in peers},
                                     {p: [((taken[p],), self.dtype.str)] if taken[p] else [] for p in peers})
        samples = [mine if p == me else (got[p][0] if taken[p] else mine[:0]) for p in range(ctx.ranks)]
        pool = xp.sort(xp.concatenate([xp.asarray(s) for s in samples]))
        picks = (np.arange(1, ctx.ranks) * len(pool)) // ctx.ranks
        return pool[xp.asarray(picks)] if len(pool) else xp.empty(0, self.dtype)

    def _counts(self, ctx: Context, mine: np.ndarray) -> np.ndarray:
        """``counts[src, dst]``: how many of rank ``src``'s values go to rank ``dst``."""
        if len(mine) < ctx.ranks:  # no values anywhere: no splitters, no buckets
            mine = np.zeros(ctx.ranks, np.int64)
        vector = mine.astype(np.int64)
        peers = [p for p in range(ctx.ranks) if p != ctx.rank]
        got = ctx.transport.exchange({p: [vector] for p in peers},
                                     {p: [((ctx.ranks,), "<i8")] for p in peers})
        return np.stack([vector if p == ctx.rank else _host(got[p][0]) for p in range(ctx.ranks)])

    def _buckets(self, ctx: Context, values, index, cuts: list, counts: np.ndarray):
        """Send bucket ``d`` to rank ``d``; merge this rank's bucket, sorted."""
        xp, me = ctx.xp, ctx.rank
        columns = [values] if index is None else [values, index]
        kinds = [self.dtype.str, "<i8"][:len(columns)]
        sends, expect = {}, {}
        for p in range(ctx.ranks):
            if p != me:
                sends[p] = [c[cuts[p]:cuts[p + 1]] for c in columns] if counts[me, p] else []
                expect[p] = [((int(counts[p, me]),), k) for k in kinds] if counts[p, me] else []
        got = ctx.transport.exchange(sends, expect)
        pieces = [[c[cuts[me]:cuts[me + 1]] for c in columns] if p == me else got[p]
                  for p in range(ctx.ranks)]
        pieces = [pc for pc in pieces if pc]
        values = xp.concatenate([xp.asarray(pc[0]) for pc in pieces])
        if index is None:
            return xp.sort(values), None
        index = xp.concatenate([xp.asarray(pc[1]) for pc in pieces])
        by_index = stable_argsort(xp, index)  # ties in global order, then a stable sort by value
        values, index = values[by_index], index[by_index]
        return None, index[stable_argsort(xp, values)]

    def _blocks(self, ctx: Context, mine, bucket_sizes: np.ndarray) -> dict:
        """Cut the buckets, in rank order, into the output blocks where their owners are."""
        xp, me = ctx.xp, ctx.rank
        offsets = np.concatenate([[0], np.cumsum(bucket_sizes)])
        kind = "<i8" if self.arg else self.dtype.str
        sends, expect, fills = ({p: [] for p in range(ctx.ranks) if p != me} for _ in range(3))
        outputs = {b: xp.empty(self.chunks[0][b[0]], np.int64 if self.arg else self.dtype)
                   for b, r in ctx.owners.items() if r == me}
        for b, owner in sorted(ctx.owners.items()):
            start, stop = int(self.starts[b[0]]), int(self.starts[b[0] + 1])
            for src in range(ctx.ranks):
                lo, hi = _overlap(int(offsets[src]), int(offsets[src + 1]), start, stop)
                if lo >= hi or (src != me and owner != me):
                    continue
                here = slice(lo - int(offsets[me]), hi - int(offsets[me]))
                if src == me and owner == me:
                    outputs[b][lo - start:hi - start] = mine[here]
                elif src == me:
                    sends[owner].append(mine[here])
                else:
                    expect[src].append(((hi - lo,), kind))
                    fills[src].append((b, slice(lo - start, hi - start)))
        got = ctx.transport.exchange(sends, expect)
        for src, arrays in got.items():
            for (b, where), value in zip(fills[src], arrays):
                outputs[b][where] = xp.asarray(value)
        return outputs
