"""CPU seconds and wall time for G GPU workers of one node to start, per start-up design.

No batch scheduler: each design's processes start on this machine against a local Dask
scheduler (TLS on unless ``--no-tls``), the way one node of a job would start them:

- ``task/GPU``: G ``python -m hpcgpu.worker`` processes, one per GPU, as one launcher task per
  GPU starts them (``one_task_per="gpu"``): G nanny processes and G worker processes;
- ``node, spawn``: one ``python -m hpcgpu.worker --gpus-per-node G`` with the nannies' worker
  processes started by ``spawn`` (distributed's default);
- ``node, forkserver``: the same with Python's ``forkserver`` (a second interpreter imports
  distributed once for all the node's workers);
- ``node, forked-server``: the same with the fork server forked from the launcher after its
  imports (hpcgpu's default with several GPUs: one interpreter start-up per node);
- ``dask worker``: ``dask worker --nworkers G`` (what dask-jobqueue runs; no GPU pinning).

The CPU time is the sum over the process tree when the G-th worker has connected, which is
what decides the start-up time on a node whose cores are busy. Run by hand::

    python benchmarks/worker_startup.py --gpus 4 --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from distributed import Client, LocalCluster
from distributed.security import Security

DESIGNS = ("task/GPU", "node, spawn", "node, forkserver", "node, forked-server", "dask worker")


def _commands(design: str, gpus: int, address: str, tls: list[str],
              node: int = 0) -> list[tuple[list[str], dict]]:
    py, common = sys.executable, ["--death-timeout", "30", *tls]
    name = ["--name", f"w{node}"]
    if design == "task/GPU":
        return [([py, "-m", "hpcgpu.worker", address, *name, *common],
                 {"HPCGPU_LOCAL_RANK": str(i), "HPCGPU_NODE_RANK": "0", "CUDA_VISIBLE_DEVICES": str(i)})
                for i in range(gpus)]
    if design == "dask worker":
        return [([py, "-m", "distributed.cli.dask_worker", address, "--nworkers", str(gpus),
                  "--nthreads", "1", *common], {})]
    method = design.split(", ")[1]
    return [([py, "-m", "hpcgpu.worker", address, *name, "--gpus-per-node", str(gpus),
              "--multiprocessing-method", method, *common],
             {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus)))})]


def _tree_cpu(pids: list[int]) -> tuple[float, int]:
    seen: dict[int, float] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                times = proc.cpu_times()
                seen[proc.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return sum(seen.values()), len(seen)


def _tls_args(security: Security | None, directory: str) -> list[str]:
    if security is None:
        return []
    paths = []
    for name, text in (("ca", security.tls_ca_file), ("cert", security.tls_worker_cert),
                       ("key", security.tls_worker_key)):
        path = Path(directory, name)
        path.write_text(text)
        paths.append(str(path))
    return ["--tls-ca-file", paths[0], "--tls-cert", paths[1], "--tls-key", paths[2]]


def one_run(design: str, gpus: int, tls: bool, nodes: int = 1) -> dict:
    """Start one design's workers, wait for all, measure, stop them."""
    security = Security.temporary() if tls else None
    with tempfile.TemporaryDirectory() as directory, LocalCluster(
            n_workers=0, processes=False, protocol="tls" if tls else "tcp", security=security,
            dashboard_address=None) as cluster, Client(cluster, security=security) as client:
        args = _tls_args(security, directory)
        start = time.perf_counter()
        procs = [subprocess.Popen(argv, env=dict(os.environ, SLURM_JOB_ID="", **env),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for node in range(nodes)
                 for argv, env in _commands(design, gpus, cluster.scheduler_address, args, node)]
        try:
            client.wait_for_workers(gpus * nodes, timeout=120)
            wall = time.perf_counter() - start
            cpu, processes = _tree_cpu([p.pid for p in procs])
            visible = sorted(map(str, client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES")).values()))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
    return {"wall": wall, "cpu": cpu, "processes": processes, "visible": visible}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1,
                        help="start this many nodes' processes at once (one machine: their CPU is shared)")
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    parser.add_argument("--no-tls", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {d: [] for d in args.designs}
    for _ in range(args.runs):
        for design in args.designs:  # take turns, so that the machine's load falls on all alike
            results[design].append(one_run(design, args.gpus, not args.no_tls, args.nodes))
    print(f"G={args.gpus} x {args.nodes} node(s), TLS {'off' if args.no_tls else 'on'}, {args.runs} runs, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("| design | processes | CPU s, median (runs) | wall s, median | CUDA_VISIBLE_DEVICES |")
    print("| --- | --- | --- | --- | --- |")
    for design, runs in results.items():
        cpu = [r["cpu"] for r in runs]
        print(f"| {design} | {runs[0]['processes']} | {statistics.median(cpu):.2f} "
              f"({', '.join(f'{c:.2f}' for c in cpu)}) | "
              f"{statistics.median(r['wall'] for r in runs):.2f} | {', '.join(runs[0]['visible'])} |")


if __name__ == "__main__":
    main()
