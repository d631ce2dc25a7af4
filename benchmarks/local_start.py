"""CPU seconds and wall time of starting and closing ``LocalGPUCluster(n_workers=N)`` R times
in one process, per way its nannies start their worker processes (CPU mode, no GPU).

- ``forkserver`` (the default): forked from a fork server that imported distributed and
  hpcgpu's worker modules once per process (:mod:`hpcgpu.worker.forkstart`);
- ``spawn`` (``hpcgpu.local-multiprocessing-method: spawn``): a fresh interpreter per worker.

The whole process tree counts: this script makes itself a child subreaper and runs the
clusters in a child process, so the nannies' worker processes, the fork server and the
resource tracker are reaped here and their CPU time is in ``RUSAGE_CHILDREN``. The methods
take turns, so load from other processes falls on both alike. Run by hand::

    python benchmarks/local_start.py --workers 4 --clusters 5 --runs 3
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import time

CHILD = """
import sys
from distributed import Client
from hpcgpu import LocalGPUCluster
n, clusters = int(sys.argv[1]), int(sys.argv[2])
for _ in range(clusters):
    with LocalGPUCluster(n_workers=n, gpus=[], dashboard_address=None, silence_logs=40) as cluster, \\
            Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == n
"""


def _measure(method: str, workers: int, clusters: int) -> tuple[float, float]:
    """(wall s, CPU s) of one child process running ``clusters`` clusters, its tree included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, DASK_HPCGPU__LOCAL_MULTIPROCESSING_METHOD=method)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD, str(workers), str(clusters)], env=env, check=True)
    while True:  # the orphans (fork server, resource tracker) are reaped here
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clusters", type=int, default=5, help="clusters started one after another per process")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=["spawn", "forkserver"])
    args = parser.parse_args()
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in args.methods}
    for _ in range(args.runs):
        for method in args.methods:
            results[method].append(_measure(method, args.workers, args.clusters))
    starts = args.workers * args.clusters
    print("| method | CPU s, median (runs) | wall s, median | CPU s per worker start |")
    print("| --- | --- | --- | --- |")
    for method, runs in results.items():
        cpu = statistics.median(c for _, c in runs)
        print(f"| `{method}` | {cpu:.1f} ({', '.join(f'{c:.1f}' for _, c in runs)}) | "
              f"{statistics.median(w for w, _ in runs):.1f} | {cpu / starts if starts else 0:.2f} |")


if __name__ == "__main__":
    main()
