"""Dask's per-task cost on the array-sum graph shape, with and without hpcgpu's fusion (CPU).

50 x 50 blocks of 1 x 1 NumPy (no work), ``(x + 1).sum()``, on one local worker process
with one thread. Prints tasks after optimization and seconds per run.

    python benchmarks/task_overhead.py [--blocks 50] [--runs 2]
"""

import argparse
import time

import dask
from distributed import Client, LocalCluster

import hpcgpu.array as ha


def graph(blocks: int = 50, chunk: int = 1):
    x = ha.random.normal(10, 1, size=(blocks * chunk,) * 2, chunks=(chunk, chunk), seed=0, backend="cpu")
    return (x + 1)[::1, ::1].sum()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=50, help="blocks along each axis")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        for _ in range(args.runs):
            for width in (0, 16):
                with dask.config.set({"hpcgpu.array.fuse-width": width}):
                    y = graph(args.blocks)
                    tasks = len(dict(dask.optimize(y)[0].__dask_graph__()))
                    start = time.perf_counter()
                    client.compute(y).result()
                    seconds = time.perf_counter() - start
                print(f"fuse-width {width:2d}: {tasks:5d} tasks {seconds:6.2f} s {seconds / tasks * 1e3:6.2f} ms/task")
