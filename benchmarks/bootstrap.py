"""Bootstrap time on the local SLURM: scale(gpus=N) -> N workers connected.

hpcgpu's SLURMCluster (one worker per GPU, TLS on; by default one srun task per node that
starts a pinned nanny per GPU) versus dask-jobqueue 0.9's SLURMCluster set up the best way a
user can for the same GPU shape (``--gres=gpu:4``, ``processes=4``, ``cores=4``), and hpcgpu
with ``one_task_per="gpu"`` (one srun task, so one nanny process, per GPU): N = 4 and 8,
``--runs`` runs each, medians and their ratio, plus the ``CUDA_VISIBLE_DEVICES`` each worker
saw and the time to the first worker. The clusters take turns run by run, so that the load of a
shared machine falls on all of them alike. Not a test: run it by hand, as root, with the local
SLURM up::

    python benchmarks/bootstrap.py --runs 5 --out benchmarks/results/cpu/bootstrap_slurm.json
"""

from __future__ import annotations

import argparse
import gc
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
from hpcgpu.system.workers import scheduler_workers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _visible(client: Client) -> list[str]:
    seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES", "unset") + "@"
                      + os.environ.get("SLURMD_NODENAME", "?"))
    return sorted(seen.values())


def _job_ids(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-t", "PD,R,CG,CF", "-o", "%i"],
                         capture_output=True, text=True).stdout
    return out.split()


def _wait(client: Client, n: int, start: float, timeout: float = 300) -> tuple[float, float]:
    """Seconds from ``start`` to the first and to the ``n``-th worker connected."""
    first = None
    while time.perf_counter() - start < timeout:
        count = len(scheduler_workers(client))
        now = time.perf_counter() - start
        if count and first is None:
            first = now
        if count >= n:
            return first, now
        time.sleep(0.05)
    raise TimeoutError(f"{n} workers did not connect within {timeout} s")


def _one_run(cluster, n: int, job_name: str) -> dict:
    with Client(cluster) as client:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        if hasattr(cluster, "gpus_per_job"):
            cluster.scale(gpus=n)
        else:
            cluster.scale(n)
        first, elapsed = _wait(client, n, start)
        visible = _visible(client)
        cluster.scale(0)
        deadline = time.time() + 120
        while (scheduler_workers(client) or _job_ids(job_name)) and time.time() < deadline:
            time.sleep(0.5)
    return {"seconds": elapsed, "first": first, "load": load, "visible": visible}


def _clusters(logs: str):
    from dask_jobqueue import SLURMCluster as JQCluster

    from hpcgpu import SLURMCluster

    hpcgpu = dict(gpus_per_node=4, cpus_per_gpu=1, memory_per_gpu="1GiB", walltime="00:20:00",
                  log_directory=logs, scheduler_options={"dashboard_address": "localhost:0"})
    yield "hpcgpu", "hpcgpu-bench", SLURMCluster(job_name="hpcgpu-bench", **hpcgpu)
    yield "dask-jobqueue", "jq-bench", JQCluster(
        cores=4, processes=4, memory="4GiB", walltime="00:20:00", job_name="jq-bench",
        job_extra_directives=["--gres=gpu:4"], log_directory=logs,
        scheduler_options={"dashboard_address": "localhost:0"})
    yield "hpcgpu task/GPU", "hpcgpu-bench-pg", SLURMCluster(
        job_name="hpcgpu-bench-pg", one_task_per="gpu", **hpcgpu)


def _summary(label: str, n: int, runs: list[dict]) -> dict:
    times = [r["seconds"] for r in runs]
    return {"seconds": times, "median": statistics.median(times),
            "first_worker": [r["first"] for r in runs], "load_average": [r["load"] for r in runs],
            "cuda_visible_devices": dict(Counter(runs[-1]["visible"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores, local SLURM "
                     "4 fake nodes x 4 fake GPUs", "runs": args.runs, "data": {}}
    runs: dict = {}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as logs:
        clusters = list(_clusters(logs))
        try:
            for _ in range(args.runs):
                for n in args.gpus:
                    for label, job_name, cluster in clusters:  # take turns, run by run
                        run = _one_run(cluster, n, job_name)
                        runs.setdefault((label, n), []).append(run)
                        print(f"{label:16s} N={n}: {run['seconds']:.2f} s (first worker "
                              f"{run['first']:.2f} s, load {run['load']:.1f})", flush=True)
        finally:
            for _, _, cluster in clusters:
                cluster.close()
            clusters.clear()
            gc.collect()  # their temporary TLS files live in ``logs``: delete them first
    for (label, n), values in runs.items():
        summary = results["data"][f"{label} N={n}"] = _summary(label, n, values)
        print(f"{label:16s} N={n}: median {summary['median']:.2f} s runs "
              f"{[round(t, 2) for t in summary['seconds']]} CVD {summary['cuda_visible_devices']}")
    for n in args.gpus:
        for label in ("hpcgpu", "hpcgpu task/GPU"):
            ratio = results["data"][f"{label} N={n}"]["median"] / results["data"][
                f"dask-jobqueue N={n}"]["median"]
            results["data"][f"ratio {label} N={n}"] = ratio
            print(f"ratio {label}/dask-jobqueue N={n}: {ratio:.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
