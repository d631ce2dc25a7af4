"""Where one 10000 x 10000 float64 array-sum chunk spends its time on a GPU.

Per operation (CUDA events, milliseconds): generator set-up, generation, ``+ 1``, the
strided sum as Dask calls it (``axis=(0, 1), keepdims=True``) and with ``axis=None``; then
per-block loops of 100 blocks (wall clock, one synchronisation at the end; each also says
when the loop had queued its last block, which equals the end when a step waits for the
GPU) that differ in one thing each: a fresh or re-keyed cuRAND generator per block vs
hpcgpu's Philox kernel, CuPy's memory pool vs an RMM pool. Writes ``$OUT/chunk_profile.json``.

    python benchmarks/gpu/chunk_profile.py      # on a GPU machine
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import cupy
from cupy.cuda import curand

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from hpcgpu.array.philox import philox_block  # noqa: E402
from hpcgpu.array.random import block_seed  # noqa: E402
from hpcgpu.worker.gpusetup import setup_rmm  # noqa: E402

N = 10_000
ROWS: dict = {}


def gpu_ms(func, reps: int = 10) -> float:
    func()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(reps):
        func()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / reps


def wall_ms_per_block(step, blocks: int = 100) -> tuple[float, float]:
    """Per block: the wall time until the loop has queued its last block, and until the
    GPU is done. Equal when a step waits for the GPU: then the CPU cannot run ahead."""
    step(0)
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    total = cupy.zeros((1, 1))
    for b in range(blocks):
        total += step(b)
    queued = time.perf_counter() - start
    float(total[0, 0])
    return queued / blocks * 1e3, (time.perf_counter() - start) / blocks * 1e3


def fresh_state(b):
    return cupy.random.RandomState(block_seed(0, (b, 0)), method=curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)


def record(name: str, value) -> None:
    if isinstance(value, tuple):  # a loop: (queued, done)
        ROWS[name] = {"queued_ms": round(value[0], 4), "done_ms": round(value[1], 4)}
        print(f"{name:<70} {value[1]:9.3f} ms  (queued after {value[0]:.3f} ms)", flush=True)
        return
    ROWS[name] = round(value, 4)
    print(f"{name:<70} {value:9.3f} ms", flush=True)


def main() -> None:
    state = fresh_state(1)
    x = state.normal(10, 1, (N, N))
    record("create a Philox RandomState (wall)", wall_ms_per_block(lambda b: (fresh_state(b), cupy.zeros((1, 1)))[1]))
    record("re-key one cuRAND Philox generator, then normal (wall)",
           wall_ms_per_block(lambda b: (state.seed(b), state.normal(10, 1, (N, N)))[1][:1, :1]))
    record("normal f64, 10000^2, cuRAND", gpu_ms(lambda: state.normal(10, 1, (N, N))))
    record("normal f64, 10000^2, hpcgpu Philox kernel",
           gpu_ms(lambda: philox_block(block_seed(0, (0, 0)), "normal", (10.0, 1.0), "float64", (N, N))))
    record("x + 1", gpu_ms(lambda: x + 1))
    record("(x + 1)[::2, ::2].sum(axis=(0, 1), keepdims=True)  (Dask's chunk step)",
           gpu_ms(lambda: (x + 1)[::2, ::2].sum(axis=(0, 1), keepdims=True)))
    record("x[::2, ::2].sum(axis=(0, 1), keepdims=True)", gpu_ms(lambda: x[::2, ::2].sum(axis=(0, 1), keepdims=True)))
    record("x[::2, ::2].sum()  (axis=None)", gpu_ms(lambda: x[::2, ::2].sum(), reps=3))
    record("x.sum()", gpu_ms(lambda: x.sum()))
    from dask.array.chunk import getitem  # copies a view smaller than half its block

    half = (slice(None, None, 2), slice(None, None, 2))
    record("getitem(x, (::2, ::2))  (Dask's slice: a contiguous copy)", gpu_ms(lambda: getitem(x, half)))
    record("getitem(x + 1, (::2, ::2)).sum(axis=(0, 1), keepdims=True)",
           gpu_ms(lambda: getitem(x + 1, half).sum(axis=(0, 1), keepdims=True)))
    record("getitem(x, (::2, ::2)) + 1, then the sum  (slice pushed below +1)",
           gpu_ms(lambda: (getitem(x, half) + 1).sum(axis=(0, 1), keepdims=True)))

    def chunk(make):
        return lambda b: getitem(make(b) + 1, half).sum(axis=(0, 1), keepdims=True)

    def pushed_down(b):  # the step hpcgpu runs: the slice below the + 1
        block = philox_block(block_seed(0, (b, 0)), "normal", (10.0, 1.0), "float64", (N, N))
        return (getitem(block, half) + 1).sum(axis=(0, 1), keepdims=True)

    record("loop: fresh RandomState per block, CuPy pool",
           wall_ms_per_block(chunk(lambda b: fresh_state(b).normal(10, 1, (N, N)))))
    record("loop: hpcgpu Philox kernel, CuPy pool",
           wall_ms_per_block(chunk(lambda b: philox_block(block_seed(0, (b, 0)), "normal", (10.0, 1.0), "float64", (N, N)))))
    allocator = setup_rmm("40GiB", cupy.cuda.runtime.memGetInfo()[1])
    if allocator.startswith("rmm-pool"):
        record("loop: hpcgpu Philox kernel, RMM pool",
               wall_ms_per_block(chunk(lambda b: philox_block(block_seed(0, (b, 0)), "normal", (10.0, 1.0), "float64", (N, N)))))
        record("loop: hpcgpu Philox kernel, slice pushed down, RMM pool", wall_ms_per_block(pushed_down))
        record("loop: fresh RandomState per block, RMM pool",
               wall_ms_per_block(chunk(lambda b: fresh_state(b).normal(10, 1, (N, N)))))
    else:
        print("no RMM pool:", allocator)
    clocks = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw,pstate",
                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    ROWS["nvidia-smi"] = clocks
    print(clocks)
    with open(os.path.join(os.environ.get("OUT", "."), "chunk_profile.json"), "w") as handle:
        json.dump(ROWS, handle, indent=1)


if __name__ == "__main__":
    main()
