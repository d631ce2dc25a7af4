"""Where a warm array-sum's time goes on a LocalGPUCluster of 1, 2 or 4 GPUs.

For each compute: the client's build and optimise-free submit (``client.compute`` until it
returns), the time to the first task's start, each worker's busy time (summed task time)
and the span of its tasks, and the time from the last task's end to the result. The
optimiser itself runs on the scheduler; its time is measured apart in this process.

    python benchmarks/gpu/phases.py --gpus 1,2,4 [--smoke]
    hpcgpu run benchmarks/gpu/phases.py --gpus 4        # the allocation's cluster

The first (cold) compute of each cluster is printed too, with ``"cold": true``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time

from distributed import Client, get_task_stream

import hpcgpu.array as ha
from hpcgpu.array.optimization import Settings, optimize


def array_sum(n, chunk, backend):
    x = ha.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=42, backend=backend)
    return (x + 1)[::2, ::2].sum()


def one(client, n, chunk, backend) -> dict:
    t0 = time.time()
    future = client.compute(array_sum(n, chunk, backend))
    t_submitted = time.time()
    with get_task_stream(client) as stream:
        future.result()
    t_done = time.time()
    tasks = stream.data
    starts = [s["start"] for t in tasks for s in t["startstops"] if s["action"] == "compute"]
    stops = [s["stop"] for t in tasks for s in t["startstops"] if s["action"] == "compute"]
    per: dict = {}  # worker -> [busy, first start, last stop, tasks]
    for t in tasks:
        for s in t["startstops"]:
            if s["action"] == "compute":
                w = per.setdefault(t["worker"], [0.0, s["start"], s["stop"], 0])
                w[0] += s["stop"] - s["start"]
                w[1], w[2], w[3] = min(w[1], s["start"]), max(w[2], s["stop"]), w[3] + 1
    rows = sorted(per.values())
    return {"wall": t_done - t0, "submit": t_submitted - t0, "first_task": min(starts) - t0,
            "last_task_end": max(stops) - t0, "gather": t_done - max(stops), "tasks": len(tasks),
            "busy_per_worker": [round(w[0], 4) for w in rows],
            "first_per_worker": [round(w[1] - t0, 4) for w in rows],
            "last_per_worker": [round(w[2] - t0, 4) for w in rows],
            "tasks_per_worker": [w[3] for w in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1,2,4")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, chunk, backend = (2000, 40, "cpu") if args.smoke else (500_000, 10_000, "gpu")
    for gpus in [int(g) for g in args.gpus.split(",")]:
        y = array_sum(n, chunk, backend)
        for threads in (1, gpus):
            start = time.perf_counter()
            optimize(y.__dask_graph__(), y.__dask_keys__(), settings=Settings(threads=threads))
            print(json.dumps({"gpus": gpus, "optimize_s_for_threads": threads, "s": time.perf_counter() - start}))
        with _client(gpus, backend) as client:
            client.wait_for_workers(gpus)
            for repeat in range(args.repeats + 1):
                print(json.dumps({"gpus": gpus, "cold": repeat == 0,
                                  **{k: (round(v, 4) if isinstance(v, float) else v)
                                     for k, v in one(client, n, chunk, backend).items()}}), flush=True)


@contextlib.contextmanager
def _client(gpus: int, backend: str):
    """The cluster of ``hpcgpu run`` where the script runs under it, else a new LocalGPUCluster."""
    if os.environ.get("DASK_SCHEDULER_ADDRESS"):
        import hpcgpu

        yield hpcgpu.get_client()
        return
    from hpcgpu import LocalGPUCluster

    devices = [str(i) for i in range(gpus)] if backend == "gpu" else []
    with LocalGPUCluster(n_workers=gpus, gpus=devices, dashboard_address=None, silence_logs=40) as cluster, \
            Client(cluster) as client:
        yield client


if __name__ == "__main__":
    main()
