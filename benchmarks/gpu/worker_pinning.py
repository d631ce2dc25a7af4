"""On a GPU node: one ``hpcgpu.worker --gpus-per-node G`` pins G workers to G distinct GPUs.

Checks, on real GPUs, what the CPU-only tests cannot: each worker process (forked from the
fork server, default) sees exactly one device, a distinct one (NVML UUIDs); CuPy allocates
through RMM there and computes; a killed worker comes back on the same GPU. Then times start-up
per design (as ``benchmarks/worker_startup.py``: one process per GPU, one per node with
``spawn`` or ``forkserver``, ``dask worker --nworkers G``). Writes ``$OUT/worker_pinning.json``
and prints a summary. Run from the repository root::

    OUT=/tmp/out PYTHONPATH=.:$PYTHONPATH python benchmarks/gpu/worker_pinning.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from distributed import Client, LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker_startup import DESIGNS, one_run  # noqa: E402
from hpcgpu.system.workers import scheduler_workers


def _device_report() -> dict:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import cupy
    except ImportError:  # a CPU machine: the plumbing only
        return {"devices": None, "sum": None, "allocator": None, "cvd": cvd}
    x = cupy.arange(1_000_000, dtype="float64")
    return {"devices": cupy.cuda.runtime.getDeviceCount(), "sum": float(x.sum()),
            "allocator": repr(cupy.cuda.get_allocator())[:100], "cvd": cvd}


def _placement(client: Client) -> dict:
    return client.run_on_scheduler(lambda dask_scheduler: {
        str(ws.name): (ws.address, ws.extra.get("hpcgpu", {})) for ws in dask_scheduler.workers.values()})


def check_pinning(gpus: int) -> dict:
    """Start G pinned workers from one process, check them, kill one, check it again."""
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "gpu",
             "--gpus-per-node", str(gpus), "--death-timeout", "60"],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus)))))
        try:
            start = time.perf_counter()
            client.wait_for_workers(gpus, timeout=180)
            seconds = time.perf_counter() - start
            placement = _placement(client)
            devices = client.run(_device_report)
            uuids = {name: meta.get("uuid") for name, (_, meta) in placement.items()}
            victim_name = sorted(placement)[-1]
            victim = placement[victim_name][0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            deadline = time.time() + 120
            while time.time() < deadline:
                info = scheduler_workers(client)
                if victim not in info and len(info) == gpus:
                    break
                time.sleep(0.5)
            again = _placement(client)
        finally:
            proc.terminate()
            proc.wait(60)
    return {
        "seconds_to_connect": seconds, "uuids": uuids, "devices": devices,
        "setup": {name: {k: meta.get(k) for k in ("allocator", "device_memory_limit", "cpu_affinity", "model")}
                  for name, (_, meta) in placement.items()},
        "distinct_gpus": len(set(uuids.values())) == gpus and None not in uuids.values(),
        "one_device_each": all(d["devices"] == 1 for d in devices.values()),
        "restarted_same_gpu": {k: again.get(victim_name, (None, {}))[1].get(k) for k in
                               ("uuid", "cuda_visible_devices")}
                              == {k: placement[victim_name][1].get(k) for k in
                                  ("uuid", "cuda_visible_devices")}
                              and again[victim_name][0] != victim,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"gpus": args.gpus, "cores": os.cpu_count(), "pinning": check_pinning(args.gpus)}
    timings: dict = {d: [] for d in DESIGNS}
    for _ in range(args.runs):
        for design in DESIGNS:
            timings[design].append(one_run(design, args.gpus, tls=True))
    result["startup"] = timings
    (out / "worker_pinning.json").write_text(json.dumps(result, indent=2, default=str))
    p = result["pinning"]
    print(f"distinct GPUs {p['distinct_gpus']}, one device each {p['one_device_each']}, "
          f"restart on the same GPU {p['restarted_same_gpu']}, connect {p['seconds_to_connect']:.2f} s")
    print(f"setup {p['setup']}")
    for design, runs in timings.items():
        cpu = sorted(r["cpu"] for r in runs)
        wall = sorted(r["wall"] for r in runs)
        print(f"{design:18s} CPU s median {cpu[len(cpu) // 2]:.2f}  wall s median "
              f"{wall[len(wall) // 2]:.2f}  CVD {runs[0]['visible']}")


if __name__ == "__main__":
    main()
