"""In one process, no scheduler: the 2 TB array-sum's blocks run back to back, timed at two
fuse widths, then a cProfile of 400 blocks (where a fused task's CPU time goes).

    python benchmarks/gpu/fused_profile.py      # on a GPU machine, from the repository root
"""

import cProfile
import io
import os
import pstats
import sys
import time

import cupy
import dask

sys.path.insert(0, os.getcwd())
import hpcgpu.array as ha  # noqa: E402


def graph(n: int):
    x = ha.random.normal(10, 1, size=(n, n), chunks=(10000, 10000), seed=0, backend="cupy")
    return (x + 1)[::2, ::2].sum()


def main() -> None:
    for width in ("auto", 16):
        with dask.config.set({"hpcgpu.array.fuse-width": width, "scheduler": "sync"}):
            graph(100000).compute()  # warm: kernels, memory pool
            for n in (200000, 500000):
                cupy.cuda.Device().synchronize()
                start = time.perf_counter()
                (opt,) = dask.optimize(graph(n))
                optimized = time.perf_counter()
                value = opt.compute()
                cupy.cuda.Device().synchronize()
                done = time.perf_counter()
                print(f"width {width} n {n}: blocks {(n // 10000) ** 2} tasks {len(dict(opt.__dask_graph__()))} "
                      f"optimize {optimized - start:.3f} s run {done - optimized:.3f} s value {float(value)}", flush=True)
    with dask.config.set({"scheduler": "sync"}):
        (opt,) = dask.optimize(graph(200000))
        profile = cProfile.Profile()
        profile.enable()
        opt.compute()
        cupy.cuda.Device().synchronize()
        profile.disable()
        for key in ("cumtime", "tottime"):
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats(key).print_stats(30)
            print(text.getvalue())


if __name__ == "__main__":
    main()
