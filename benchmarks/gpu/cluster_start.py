"""Where a local GPU cluster's start-up goes: dask-cuda's LocalCUDACluster beside hpcgpu's
LocalGPUCluster (TLS on and off; ``--flavors dask-cuda-ucx,hpcgpu-ucx``: over UCX), interleaved,
with the published notebook's arguments.

Per start: the constructor's wall time, when the worker process was created, and the
worker's own log lines with their times (import, RMM, plugins, registration), as offsets
from the constructor's call.

    python benchmarks/gpu/cluster_start.py --repeats 6 --out DIR
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

ARGS = dict(device_memory_limit="4GB", rmm_pool_size="6GB", silence_logs=False)  # INFO lines: the phases
GPUS = "0"  # CUDA_VISIBLE_DEVICES of both clusters (--gpus)


def make(flavor: str):
    """``dask-cuda``, ``hpcgpu`` (TLS), ``hpcgpu-tcp``; a ``-ucx`` suffix: ``protocol="ucx"``."""
    ucx = {"protocol": "ucx"} if flavor.endswith("-ucx") else {}
    if flavor.startswith("dask-cuda"):
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(CUDA_VISIBLE_DEVICES=GPUS, **ARGS, **ucx)
    from hpcgpu import LocalGPUCluster

    return LocalGPUCluster(CUDA_VISIBLE_DEVICES=GPUS, **ARGS, **ucx, **({"security": False} if flavor == "hpcgpu-tcp" else {}))


def _stamp(line: str) -> float | None:
    found = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
    if not found:
        return None
    return time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")) + int(found.group(2)) / 1000


def one(flavor: str) -> dict:
    import psutil
    from distributed import Client

    t0 = time.time()
    cluster = make(flavor)
    t1 = time.time()
    client = Client(cluster)
    t2 = time.time()
    created = client.run(lambda: psutil.Process().create_time())
    mods = client.run(lambda: len(__import__("sys").modules))
    logs = client.get_worker_logs()
    added = client.run_on_scheduler(lambda dask_scheduler: [
        t for t, msg in dask_scheduler.get_events("all") if isinstance(msg, dict) and msg.get("action") == "add-worker"])
    t3 = time.time()
    client.close()
    cluster.close()
    t4 = time.time()
    lines = []
    for level_lines in logs.values():
        for _, text in level_lines:
            for line in text.splitlines():
                at = _stamp(line)
                if at is not None:
                    lines.append((round(at - t0, 3), line[24:200]))
    return dict(flavor=flavor, constructor=t1 - t0, client=t2 - t1, close=t4 - t3,
                worker_created=[c - t0 for c in created.values()], worker_added=[a - t0 for a in added], modules=list(mods.values()),
                worker_log=sorted(lines))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--flavors", default="dask-cuda,hpcgpu-tcp,hpcgpu")
    parser.add_argument("--out", default=".")
    parser.add_argument("--gpus", default="0", help="CUDA_VISIBLE_DEVICES of both clusters")
    args = parser.parse_args()
    global GPUS
    GPUS = args.gpus
    flavors, runs = args.flavors.split(","), []
    for r in range(args.repeats + 1):
        for flavor in flavors if r % 2 == 0 else flavors[::-1]:
            run = dict(one(flavor), repeat=r)
            runs.append(run)
            print(f"{r} {flavor:<11} constructor {run['constructor']:.3f} s, client {run['client']:.3f} s, worker created at "
                  f"{run['worker_created']}, registered at {run['worker_added']}, modules {run['modules']}", flush=True)
            Path(args.out, "cluster_start.json").write_text(json.dumps(runs, indent=1))
    for flavor in flavors:
        times = [r["constructor"] for r in runs if r["flavor"] == flavor and r["repeat"] > 0]
        print(f"{flavor:<11} median constructor {statistics.median(times):.3f} s over {len(times)}: "
              f"{[round(t, 2) for t in times]}")
    for flavor in flavors:
        print(f"--- {flavor}, last start's worker log")
        for at, line in [r for r in runs if r["flavor"] == flavor][-1]["worker_log"]:
            print(f"{at:8.3f} {line}")


if __name__ == "__main__":
    main()
