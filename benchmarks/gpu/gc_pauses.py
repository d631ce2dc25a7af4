"""Repeats of the array-sum on a one-GPU LocalGPUCluster, and the garbage collector's pauses.

Per repeat: wall time, graph build, the scheduler's materialisation, first task start and
last task end (seconds after submission), and the pauses of the collector in the client
process (where the scheduler runs) and in the worker, with each full collection listed, and
the objects the collector tracks in the client process after it.
Then three no-op graphs of the same shape. Why some repeats take 1.0 s where most take
0.7 s: in every slow one the client process ran a full collection of 0.14-0.51 s.

    python benchmarks/gpu/gc_pauses.py [N CHUNK REPEATS BACKEND FREEZE]

FREEZE: ``none`` (what hpcgpu does), ``client`` (``gc.freeze()`` in this process after the
cluster starts, as a user may do), ``worker`` (freeze the workers again), ``both``.
Defaults: 500000 10000 10 gpu none (2 TB, 2,500 blocks). ``cpu`` runs NumPy blocks.
"""

from __future__ import annotations

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/

from distributed import Client, get_task_stream  # noqa: E402
from gpu_perf import array_sum_graph  # noqa: E402  (also puts the repository on sys.path)

from hpcgpu.cluster.local import LocalGPUCluster  # noqa: E402
from hpcgpu.system.warmup import freeze_startup_objects  # noqa: E402


def install_probe() -> bool:
    """Record the collector's pauses in this process (run in each process)."""
    import gc
    import time

    state = {"start": None, "pauses": []}

    def callback(phase, info):
        if phase == "start":
            state["start"] = time.perf_counter()
        elif state["start"] is not None:
            state["pauses"].append((info["generation"], time.perf_counter() - state["start"]))

    gc.callbacks.append(callback)
    gc._hpcgpu_probe = state
    return True


def take_pauses() -> tuple:
    """(total seconds, [(generation, seconds) of full collections and pauses over 2 ms]); resets."""
    import gc

    state = gc._hpcgpu_probe
    listed = [(g, round(d, 4)) for g, d in state["pauses"] if g == 2 or d > 0.002]
    total = sum(d for _, d in state["pauses"])
    state["pauses"] = []
    return round(total, 4), listed


def main() -> None:
    defaults = ["500000", "10000", "10", "gpu", "none"]
    args = sys.argv[1:] + defaults[len(sys.argv[1:]):]
    n, chunk, repeats, (backend, frozen) = int(args[0]), int(args[1]), int(args[2]), args[3:5]
    gpus = ["0"] if backend != "cpu" else []
    with LocalGPUCluster(n_workers=1, gpus=gpus, dashboard_address=None, silence_logs=40) as cluster, \
            Client(cluster) as client:
        install_probe()
        client.run(install_probe)
        for _ in range(2):  # warm: kernels, pools
            client.compute(array_sum_graph(n, chunk, backend)).result()
        if frozen in ("client", "both"):
            freeze_startup_objects()
        if frozen in ("worker", "both"):
            client.run(freeze_startup_objects)
        take_pauses()
        client.run(take_pauses)
        workers = client.run(lambda: (__import__("gc").get_freeze_count(), len(__import__("gc").get_objects())))
        print(f"freeze={frozen}: client frozen {gc.get_freeze_count()} tracked {len(gc.get_objects())}; "
              f"worker frozen, tracked {list(workers.values())[0]}", flush=True)
        for kind in ["sum"] * repeats + ["noop"] * 3:
            with get_task_stream(client) as stream:
                start = time.time()
                collection = array_sum_graph(n, chunk, backend, noop=kind == "noop")
                built = time.time()
                client.compute(collection).result()
                wall = time.time() - start
            spans = sorted((s["start"], s["stop"]) for d in stream.data for s in d["startstops"]
                           if s["action"] == "compute")
            updates = [e["metrics"] for _, e in client.get_events("scheduler") if e.get("action") == "update-graph"]
            materialise = updates[-1].get("materialization_duration_seconds", float("nan")) if updates else float("nan")
            mine, theirs = take_pauses(), list(client.run(take_pauses).values())[0]
            print(f"{kind:4} wall {wall:.3f} build {built - start:.3f} materialise {materialise:.3f} "
                  f"first {spans[0][0] - built:.3f} last_end {spans[-1][1] - built:.3f} tasks {len(spans)} "
                  f"gc client {mine[0]} worker {theirs[0]} long/full client {mine[1]} worker {theirs[1]} "
                  f"tracked client {len(gc.get_objects())}", flush=True)


if __name__ == "__main__":
    main()
