"""Array workloads that move most of their data between workers: rechunk and matmul.

As transpose-sum and svd (:mod:`hpcgpu.bench.workloads_array`), each takes its input
persisted untimed, or, with ``generated=True`` in the size's parameters, made in the
timed graph itself. The result stays distributed (persisted), as a user's next step
would take it.
"""

from __future__ import annotations

import hpcgpu.array as ha
from hpcgpu.bench.workload import RunContext, Size, Workload
from hpcgpu.bench.workloads_array import _check, inputs, random_array

__all__ = ["RECHUNK", "MATMUL", "WORKLOADS"]

# preset -> (n, chunk) of an n x n array; issue 29's references: rechunk 40000^2, matmul 20000^2
_RECHUNK = {"tiny": (2000, 500), "small": (8000, 1000), "medium": (20000, 5000),
            "large": (40000, 5000), "full": (40000, 5000)}
_MATMUL = {"tiny": (1000, 250), "small": (4000, 1000), "medium": (10000, 2500),
           "large": (20000, 5000), "full": (20000, 5000)}


def _size(table: dict):
    def size(preset: str, gpus: int, scaling: str) -> Size:
        n, chunk = _check(preset, table)
        rows = n * gpus if scaling == "weak" else n
        return Size(f"{rows}x{n} chunk {chunk}", rows * n * 8.0, "B", {"shape": (rows, n), "chunk": chunk})
    return size


def _rows(ctx: RunContext, size: Size):
    rows, cols = size.params["shape"]
    return random_array(ctx, (rows, cols), (size.params["chunk"], cols), normal=False)


def _rechunk(ctx: RunContext, size: Size, x) -> None:
    x = _rows(ctx, size) if x is None else x
    # row blocks -> column blocks, on the collective plane where it pays (docs/collections.md)
    ctx.persist(ha.rechunk(x, (x.shape[0], size.params["chunk"])))


RECHUNK = Workload(
    "rechunk", "row blocks -> column blocks of a persisted array (all-to-all, hpcgpu.array.rechunk); "
    "generated=True: made in the graph",
    "array", _size(_RECHUNK), _rechunk, lambda ctx, size: inputs(ctx, size, _rows))


def _pair(ctx: RunContext, size: Size):
    rows, cols = size.params["shape"]
    chunk = size.params["chunk"]
    x = random_array(ctx, (rows, cols), (chunk, chunk), normal=False)
    return x, random_array(ctx, (cols, rows), (chunk, chunk), normal=True)


def _matmul_prepare(ctx: RunContext, size: Size):
    return None if size.params.get("generated") else ctx.persist(*_pair(ctx, size))


def _matmul(ctx: RunContext, size: Size, pair) -> None:
    x, y = _pair(ctx, size) if pair is None else pair
    ctx.persist(ha.matmul(x, y))


MATMUL = Workload(
    "matmul", "hpcgpu.array.matmul of two persisted square arrays; generated=True: made in the graph",
    "array", _size(_MATMUL), _matmul, _matmul_prepare)

#: The workloads this module defines (the registry lists them by name).
WORKLOADS = (RECHUNK, MATMUL)
