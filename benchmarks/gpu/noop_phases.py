"""The no-op array-sum graph on a fresh one-GPU LocalGPUCluster: where its time goes.

50 x 50 blocks of 2 x 2 NumPy, the array-sum's graph with no GPU work: the wall time, the
scheduler's graph materialisation (hpcgpu's optimizer), the first task's start and the
summed task time, best 3 of 5. The argument is the code root to import hpcgpu from
(default: this repository), so that two versions run side by side on one machine:

    python benchmarks/gpu/noop_phases.py
    python benchmarks/gpu/noop_phases.py /path/to/an/older/checkout
"""

from __future__ import annotations

import os
import sys
import time

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import hpcgpu.array as ha  # noqa: E402
from distributed import Client, get_task_stream  # noqa: E402
from hpcgpu.cluster.local import LocalGPUCluster  # noqa: E402


def graph():
    x = ha.random.normal(10, 1, size=(100, 100), chunks=(2, 2), seed=0, backend="cpu")
    return (x + 1)[::2, ::2].sum()


def phases(client) -> tuple[float, float, float, float]:
    """``(wall, materialisation, first task start, summed task time)`` of one run, seconds."""
    with get_task_stream(client) as stream:
        start = time.time()
        client.compute(graph()).result()
        wall = time.time() - start
    spans = sorted((s["start"], s["stop"]) for d in stream.data for s in d["startstops"] if s["action"] == "compute")
    update = [e["metrics"] for _, e in client.get_events("scheduler") if e.get("action") == "update-graph"][-1]
    return wall, update["materialization_duration_seconds"], spans[0][0] - start, sum(b - a for a, b in spans)


def main() -> None:
    with LocalGPUCluster(n_workers=1, dashboard_address=None, silence_logs=40) as cluster, Client(cluster) as client:
        client.compute(graph()).result()  # warm
        for wall, materialize, first, busy in sorted(phases(client) for _ in range(5))[:3]:
            print(f"{ROOT[-8:]:>8} wall {wall:.3f} materialize {materialize:.3f} first_task {first:.3f} "
                  f"busy {busy:.3f}", flush=True)


if __name__ == "__main__":
    main()
