"""Bootstrap time on the local SLURM: scale(gpus=N) -> N workers connected.

hpcgpu's SLURMCluster (one worker per GPU, TLS on) versus dask-jobqueue 0.9's SLURMCluster set
up the best way a user can for the same GPU shape (``--gres=gpu:4``, ``processes=4``,
``cores=4``): N = 4 and 8, ``--runs`` runs each, medians and their ratio, plus the
``CUDA_VISIBLE_DEVICES`` each worker saw. Not a test: run it by hand, as root, with the local
SLURM up::

    python benchmarks/bootstrap.py --runs 5 --out benchmarks/results/bootstrap.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from distributed import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _visible(client: Client) -> list[str]:
    seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES", "unset") + "@"
                      + os.environ.get("SLURMD_NODENAME", "?"))
    return sorted(seen.values())


def _job_ids(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-t", "PD,R,CG,CF", "-o", "%i"],
                         capture_output=True, text=True).stdout
    return out.split()


def _one_run(cluster, n: int, job_name: str) -> tuple[float, list[str]]:
    with Client(cluster) as client:
        start = time.perf_counter()
        if hasattr(cluster, "gpus_per_job"):
            cluster.scale(gpus=n)
        else:
            cluster.scale(n)
        client.wait_for_workers(n, timeout=300)
        elapsed = time.perf_counter() - start
        visible = _visible(client)
        cluster.scale(0)
        deadline = time.time() + 120
        while (client.scheduler_info()["workers"] or _job_ids(job_name)) and time.time() < deadline:
            time.sleep(0.5)
    return elapsed, visible


def _clusters(logs: str):
    from dask_jobqueue import SLURMCluster as JQCluster

    from hpcgpu import SLURMCluster

    yield "hpcgpu", "hpcgpu-bench", SLURMCluster(
        gpus_per_node=4, cpus_per_gpu=1, memory_per_gpu="1GiB", walltime="00:20:00",
        job_name="hpcgpu-bench", log_directory=logs,
        scheduler_options={"dashboard_address": "localhost:0"})
    yield "dask-jobqueue", "jq-bench", JQCluster(
        cores=4, processes=4, memory="4GiB", walltime="00:20:00", job_name="jq-bench",
        job_extra_directives=["--gres=gpu:4"], log_directory=logs,
        scheduler_options={"dashboard_address": "localhost:0"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores, local SLURM "
                     "4 fake nodes x 4 fake GPUs", "runs": args.runs, "data": {}}
    with tempfile.TemporaryDirectory() as logs:
        for label, job_name, cluster in _clusters(logs):
            with cluster:
                for n in args.gpus:
                    times, seen = [], []
                    for _ in range(args.runs):
                        elapsed, visible = _one_run(cluster, n, job_name)
                        times.append(elapsed)
                        seen = visible
                    results["data"][f"{label} N={n}"] = {
                        "seconds": times, "median": statistics.median(times),
                        "cuda_visible_devices": dict(Counter(seen))}
                    print(f"{label:14s} N={n}: median {statistics.median(times):.2f} s "
                          f"runs {[round(t, 2) for t in times]} CVD {dict(Counter(seen))}",
                          flush=True)
    for n in args.gpus:
        ratio = results["data"][f"hpcgpu N={n}"]["median"] / results["data"][
            f"dask-jobqueue N={n}"]["median"]
        results["data"][f"ratio N={n}"] = ratio
        print(f"ratio hpcgpu/dask-jobqueue N={n}: {ratio:.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
