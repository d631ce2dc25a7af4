"""The physical reference of array-sum: one CUDA kernel over every block, nothing in memory.

``(normal(10, 1, (n, n), chunks=(c, c)) + 1)[::2, ::2].sum()`` as one kernel: each CUDA
thread block takes a share of one Dask block's strided elements, draws each by
Philox4x32-10 + Box-Muller at that element's counter under the block's key (the mapping
of :mod:`hpcgpu.array.philox`, so the sum is hpcgpu's), adds 1, accumulates in registers,
then in shared memory, and writes one partial; CuPy sums the partials. No Dask, no
Python per block: the time the GPU itself needs for the workload.

    python benchmarks/fused_limit.py --n 500000 --chunk 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcgpu.array.fused.ops import _PRELUDE  # noqa: E402
from hpcgpu.array.random import block_seed  # noqa: E402

_THREADS, _PARTS = 256, 64

#: each thread's ``acc`` summed over the thread block (256 threads), written to out[blockIdx.x]
BLOCK_SUM = r"""
    __shared__ double buf[256];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];"""

_KERNEL = _PRELUDE + r"""
extern "C" __global__ void array_sum_limit(const unsigned long long* keys, long long chunk, long long parts,
                                           double* out) {
    long long b = blockIdx.x / parts, p = blockIdx.x % parts;
    unsigned long long key = keys[b];
    double acc = 0.0;
    for (long long row = 2 * p; row < chunk; row += 2 * parts)  // [::2, ::2]: even rows and columns
        for (long long col = 2 * threadIdx.x; col < chunk; col += 2 * blockDim.x)
            acc += rand_normal_f64(row * chunk + col, (unsigned int)key, (unsigned int)(key >> 32), 10.0, 1.0) + 1.0;
""" + BLOCK_SUM + """
}
"""


def block_keys(n: int, chunk: int, seed: int = 0) -> np.ndarray:
    """The 64-bit keys of the ``(n // chunk) ** 2`` blocks, row by row."""
    blocks = n // chunk
    return np.array([block_seed(seed, (i, j)) for i in range(blocks) for j in range(blocks)], dtype=np.uint64)


def array_sum_limit(n: int, chunk: int, repeat: int = 3) -> tuple[float, float]:
    """``(best seconds, value)`` of the one-kernel array-sum (``n`` a multiple of ``chunk``)."""
    import cupy

    if n % chunk:
        raise ValueError(f"n={n} must be a multiple of chunk={chunk}")
    kernel = cupy.RawKernel(_KERNEL, "array_sum_limit", options=("--std=c++17", "--fmad=false"))
    keys = cupy.asarray(block_keys(n, chunk))
    partials = cupy.empty(keys.size * _PARTS, dtype=cupy.float64)
    times, value = [], None
    for _ in range(repeat + 1):  # the first run compiles: not counted
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        kernel((keys.size * _PARTS,), (_THREADS,), (keys, np.int64(chunk), np.int64(_PARTS), partials))
        value = float(partials.sum())  # waits for the kernel
        times.append(time.perf_counter() - start)
    return min(times[1:]), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    args = parser.parse_args()
    seconds, value = array_sum_limit(args.n, args.chunk)
    print(f"one fused kernel, {args.n}^2 in {args.chunk}^2 blocks: {seconds:.4f} s, sum {value!r}")


if __name__ == "__main__":
    main()
