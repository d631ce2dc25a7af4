"""Where the array-sum's wall time goes beyond the GPU's own work.

Two views of the 2 TB array-sum (``(normal + 1)[::2, ::2].sum()``, 50 x 50 blocks):

1. In this process, no Dask scheduler: the optimised graph's fused tasks run one after the
   other on an RMM pool, as a worker runs them. ``enqueue_s`` is the wall time until the
   last task has returned (the CPU's part: CuPy queues kernels without waiting for them),
   ``total_s`` adds the wait for the GPU to finish (the GPU's part, when the CPU runs
   ahead); case ``sync each`` waits after every task (the two in series).
2. On LocalGPUCluster with 1, 2 and 4 GPUs (as many as there are), for each worker-saturation: the wall time, the
   scheduler's graph materialisation (its ``update-graph`` event), the times from submission
   to the graph's end of materialisation, and to the first task received by a worker and
   started, the workers' summed task time and idle time, and the transfers
   between workers (count, summed and longest time) from the task stream.

Writes ``$OUT/overlap_probe.json``.

    python benchmarks/gpu/overlap_probe.py              # on the GPU machine
    python benchmarks/gpu/overlap_probe.py --smoke      # tiny, any machine (NumPy)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dask  # noqa: E402
from distributed import Client, get_task_stream  # noqa: E402

import hpcgpu.array as ha  # noqa: E402
from hpcgpu.system.backends import cuda_device_count  # noqa: E402
from hpcgpu.cluster.local import LocalGPUCluster  # noqa: E402

ROWS: list[dict] = []


def record(**row) -> None:
    ROWS.append(row)
    print(" ".join(f"{k}={round(v, 4) if isinstance(v, float) else v}" for k, v in row.items()), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "overlap_probe.json"), "w") as handle:
        json.dump(ROWS, handle, indent=1)


def array_sum(n: int, chunk: int, backend: str):
    x = ha.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=0, backend=backend)
    return (x + 1)[::2, ::2].sum()


def in_process(n: int, chunk: int, backend: str) -> None:
    """The fused tasks run back to back here: the CPU's and the GPU's shares of the work."""
    (optimized,) = dask.optimize(array_sum(n, chunk, backend))
    graph = dict(optimized.__dask_graph__())
    roots = [task for task in graph.values() if not task.dependencies]
    sync = (lambda: None)
    if backend == "cupy":
        import cupy

        from hpcgpu.worker.gpusetup import setup_rmm

        setup_rmm("16GiB", cupy.cuda.runtime.memGetInfo()[1])
        sync = cupy.cuda.Device().synchronize
    for task in roots[:4]:
        task({})  # warm: kernels compiled, pool grown
    sync()
    for label, each in (("queued", False), ("sync each", True)):
        start = time.perf_counter()
        for task in roots:
            task({})
            if each:
                sync()
        enqueued = time.perf_counter() - start
        sync()
        record(view="in-process", case=label, fused_tasks=len(roots), steps=sum(len(t.args[0].value.steps()) for t in roots),
               enqueue_s=enqueued, total_s=time.perf_counter() - start)


def on_cluster(n: int, chunk: int, backend: str, gpus: int, saturation: float, repeat: int) -> None:
    devices = [str(i) for i in range(gpus)] if backend == "cupy" else []
    with dask.config.set({"distributed.scheduler.worker-saturation": saturation}), \
            LocalGPUCluster(n_workers=gpus, gpus=devices, threads_per_worker=1, dashboard_address=None,
                            silence_logs=40) as cluster, Client(cluster) as client:
        client.wait_for_workers(gpus, timeout=300)
        client.compute(array_sum(n // 10, chunk, backend)).result()  # warm
        for _ in range(repeat):
            with get_task_stream(client) as stream:
                start = time.time()
                client.compute(array_sum(n, chunk, backend)).result()
                wall = time.time() - start
            # Workers add their estimate of the scheduler's clock offset (scheduler_delay, from
            # heartbeat round trips) to task times; these workers share this host's clock.
            offset = client.run(lambda dask_worker: dask_worker.scheduler_delay)
            spans = [(s["start"] - offset.get(d["worker"], 0), s["stop"] - offset.get(d["worker"], 0))
                     for d in stream.data for s in d["startstops"] if s["action"] == "compute"]
            moves = [s["stop"] - s["start"] for d in stream.data for s in d["startstops"] if s["action"] == "transfer"]
            busy = sum(stop - begin for begin, stop in spans)
            first, last = min(b for b, _ in spans), max(s for _, s in spans)
            updates = [e["metrics"] for _, e in client.get_events("scheduler") if e.get("action") == "update-graph"]
            received = min(filter(None, client.run(_first_compute_event, since=start).values()), default=None)
            record(view="cluster", gpus=gpus, saturation=saturation, wall_s=wall,
                   materialize_s=updates[-1]["materialization_duration_seconds"] if updates else None,
                   graph_done_s=updates[-1]["start_timestamp_seconds"] + updates[-1]["duration_seconds"] - start
                   if updates else None,
                   first_received_s=received - start if received else None,
                   first_task_s=first - start, last_task_end_s=last - start, task_busy_s=busy,
                   worker_idle_s=gpus * (last - first) - busy, tasks=len(spans), transfers=len(moves),
                   transfer_s=sum(moves), longest_transfer_s=max(moves, default=0.0))


def _first_compute_event(dask_worker, since: float):
    """When this worker first handled a task of this run."""
    times = [event.handled for event in dask_worker.state.stimulus_log
             if type(event).__name__ == "ComputeTaskEvent" and (event.handled or 0) > since]
    return min(times, default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (NumPy where there is no GPU)")
    parser.add_argument("--saturations", default="1.1,inf")
    args = parser.parse_args()
    backend = "cupy" if cuda_device_count() else "numpy"
    n, chunk = (4000, 100) if args.smoke or backend != "cupy" else (500_000, 10_000)
    in_process(n, chunk, backend)
    counts = [g for g in (1, 2, 4) if g <= max(cuda_device_count(), 1)] if backend == "cupy" else [1]
    for gpus in counts:
        for saturation in map(float, args.saturations.split(",")):
            on_cluster(n, chunk, backend, gpus, saturation, repeat=2)


if __name__ == "__main__":
    main()
