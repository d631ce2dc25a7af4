"""QR and SVD of a tall-and-skinny array on the plane: one QR per worker and one exchange
each way.

Dask's TSQR is a tree of tasks: a QR per row block, the R factors stacked and factored
again, and the second Q split and multiplied back into each block's Q, every step a
task and every R and Q piece a message. Here each rank factors all the rows it holds in
one call (``A_r = Q1_r R_r``), sends its ``R_r`` (columns x columns at most) to rank 0,
which factors the stack (``[R_0; R_1; ...] = Q2 R``; for the SVD also ``R = U_R S V^T``,
``W = Q2 U_R``) and sends each rank its slice of ``Q2`` (``W``) back; each rank's share
of the result is ``Q1_r`` times that slice. Only factors of columns x columns cross; the
tall factor never moves.

``svd`` orients the singular vectors as :func:`dask.array.utils.svd_flip` does (by the
sign of each row sum of ``V^T``), so that the result equals Dask's up to rounding.

Examples
--------
>>> op = TallSkinny(((4, 4), (3,)), "f8", svd=True)
>>> op.outputs
[((4, 4), (3,)), ((3,),), ((3,), (3,))]
"""

from __future__ import annotations

import numpy as np

from hpcgpu.array.plane.plan import Context

__all__ = ["TallSkinny"]


class TallSkinny:
    """``q, r`` (``svd=False``) or ``u, s, vt`` of input 0: rows in any blocks, columns
    in one block, at least as many rows as columns."""

    kind = "tsqr"

    def __init__(self, chunks, dtype, svd=False, coerce_signs=True):
        self.chunks = tuple(tuple(int(c) for c in axis) for axis in chunks)
        rows, cols = self.chunks
        if len(cols) != 1 or sum(rows) < cols[0]:
            raise ValueError(f"tall-and-skinny needs one column block and rows >= columns, not chunks {self.chunks}")
        self.dtype, self.svd, self.coerce_signs = np.dtype(dtype), bool(svd), bool(coerce_signs)
        n = (cols[0],)
        self.outputs = [self.chunks, (n,), (n, n)] if self.svd else [self.chunks, (n, n)]

    def spec(self) -> dict:
        return {"kind": self.kind, "chunks": self.chunks, "dtype": self.dtype.str, "svd": self.svd,
                "coerce_signs": self.coerce_signs}

    def out_blocks(self) -> list:
        small = [(1, 0), (2, 0, 0)] if self.svd else [(1, 0, 0)]
        return [(0, i, 0) for i in range(len(self.chunks[0]))] + small

    def owners(self, holders: dict, ranks: int) -> dict:
        """The tall factor's blocks where the input's were; the small factors on rank 0."""
        return {b: holders[(0, b[1:])] if b[0] == 0 else 0 for b in self.out_blocks()}

    def run(self, ctx: Context) -> dict:
        xp, me, n = ctx.xp, ctx.rank, self.chunks[1][0]
        held = [sorted(b for (_, b), r in ctx.holders.items() if r == rank) for rank in range(ctx.ranks)]
        rows = [sum(self.chunks[0][b[0]] for b in blocks) for blocks in held]
        tops = [min(m, n) for m in rows]  # rows of each rank's R
        q1, r1 = xp.linalg.qr(xp.concatenate([xp.asarray(ctx.inputs[(0, b)]) for b in held[me]]))
        peers = [p for p in range(ctx.ranks) if p != me]
        got = ctx.transport.exchange({0: [r1]} if me else {},
                                     {p: [((tops[p], n), self.dtype.str)] for p in peers} if me == 0 else {})
        outputs, slices = {}, {}
        if me == 0:
            stack = xp.concatenate([r1] + [xp.asarray(got[p][0]) for p in peers])
            q2, r = xp.linalg.qr(stack)
            if self.svd:
                u, s, vt = xp.linalg.svd(r, full_matrices=False)
                if self.coerce_signs:  # as dask.array.utils.svd_flip: by V^T's row sums
                    signs = xp.where(vt.sum(axis=1) >= 0, 1, -1).astype(self.dtype)
                    u, vt = u * signs, vt * signs[:, None]
                q2 = q2 @ u
                outputs[(1, 0)], outputs[(2, 0, 0)] = s, vt
            else:
                outputs[(1, 0, 0)] = r
            starts = np.concatenate([[0], np.cumsum(tops)])
            slices = {p: q2[int(starts[p]):int(starts[p + 1])] for p in range(ctx.ranks)}
        got = ctx.transport.exchange({p: [slices[p]] for p in peers} if me == 0 else {},
                                     {} if me == 0 else {0: [((tops[me], n), self.dtype.str)]})
        q = q1 @ (slices[0] if me == 0 else xp.asarray(got[0][0]))
        top = 0
        for b in held[me]:
            height = self.chunks[0][b[0]]
            outputs[(0,) + b] = xp.ascontiguousarray(q[top:top + height])
            top += height
        return outputs
