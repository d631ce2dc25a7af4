"""Submission throughput and polling cost of a cluster with many jobs, on a real scheduler.

    python benchmarks/submit_throughput.py --jobs 200 [--scheduler slurm] [--mode both]
        [--out results.json]

Jobs are submitted held (``--hold`` on SLURM, ``-h`` on SGE) so that they never run and never
stand in the way of anyone else's jobs; everything submitted is cancelled at the end. Reports:
seconds from ``scale(jobs=N)`` until every job has an id, jobs per second, status calls per
poll interval and the duration of one status call for all N jobs, and the cancellation time.
``--mode single`` submits N single jobs (``job_arrays=False``), ``array`` one array job of N
elements (docs/arrays.md), ``both`` one after the other.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from hpcgpu import SGECluster, SLURMCluster
from hpcgpu.system import commands

HOLD = {"slurm": ["--hold"], "sge": ["-h"]}
STATUS = {"slurm": "squeue", "sge": "qstat"}
SUBMIT = {"slurm": "sbatch", "sge": "qsub"}


def measure(scheduler: str, jobs: int, poll_interval: float, log_directory: str,
            arrays: bool = False) -> dict:
    calls: list[tuple[str, float, float]] = []  # (command, start, seconds)
    real = commands.runner

    def timed(argv, timeout, input):
        start = time.monotonic()
        result = real(argv, timeout, input)
        calls.append((argv[0], start, time.monotonic() - start))
        return result

    cls = {"slurm": SLURMCluster, "sge": SGECluster}[scheduler]
    commands.set_runner(timed)
    try:
        cluster = cls(gpus_per_node=1, walltime="00:05:00", job_extra_directives=HOLD[scheduler],
                      poll_interval=poll_interval, log_directory=log_directory,
                      scheduler_options={"dashboard_address": "localhost:0"},
                      job_arrays=arrays)
        start = time.monotonic()
        cluster.scale(jobs=jobs)
        while sum(bool(j.job_id) for j in cluster.jobs) < jobs:
            time.sleep(0.05)
        submitted = time.monotonic() - start
        window_start = time.monotonic()
        polls: list = []
        # ten poll intervals, and at least one finished status call (a loaded machine's may
        # take longer than the window): its median is the figure
        while time.monotonic() - window_start < 10 * poll_interval or not polls:
            time.sleep(0.05)
            polls = [c for c in list(calls) if c[0] == STATUS[scheduler] and c[1] >= window_start]
        window = time.monotonic() - window_start
        start = time.monotonic()
        cluster.close()
        cancelled = time.monotonic() - start
    finally:
        commands.set_runner(None)
    return {
        "scheduler": scheduler, "mode": "array" if arrays else "single", "jobs": jobs,
        "submit_calls": sum(c[0] == SUBMIT[scheduler] for c in calls),
        "poll_interval_s": poll_interval,
        "submit_s": round(submitted, 2), "jobs_per_s": round(jobs / submitted, 1),
        "status_calls_per_interval": round(len(polls) / (window / poll_interval), 2),
        "status_call_s_median": round(statistics.median(c[2] for c in polls), 3),
        "cancel_calls": sum(c[0] in ("scancel", "qdel") for c in calls),
        "cancel_s": round(cancelled, 2), "machine": platform.node(),
        "cpus": __import__("os").cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--scheduler", choices=["slurm", "sge"], default="slurm")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--log-directory", default="/tmp/hpcgpu-submit-bench")
    parser.add_argument("--mode", choices=["single", "array", "both"], default="both")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    modes = {"single": [False], "array": [True], "both": [False, True]}[args.mode]
    runs = [measure(args.scheduler, args.jobs, args.poll_interval, args.log_directory, arrays)
            for arrays in modes]
    result = runs[0] if len(runs) == 1 else {"runs": runs, "array_speedup": round(
        runs[0]["submit_s"] / max(runs[1]["submit_s"], 1e-3), 1)}
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as file:
            json.dump(result, file, indent=2)


if __name__ == "__main__":
    main()
