"""Load: 200 jobs through scale on the real local SLURM without the cluster falling behind.

The jobs are submitted held (``--hold``): they never run, so no 200 Dask workers on 2 cores
and nobody else's jobs wait behind them; all are cancelled at the end. Throughput numbers
are in benchmarks/submit_throughput.py and docs/reliability.md, not asserted here.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from conftest import wait_for
from hpcgpu import SLURMCluster
from hpcgpu.system import commands

pytestmark = pytest.mark.slurm


def test_200_jobs_one_status_call_per_interval_one_cancel(slurm, tmp_path):
    calls: list[tuple[float, list[str]]] = []
    real = commands.runner

    def counting(argv, timeout, input):
        calls.append((time.monotonic(), list(argv)))
        return real(argv, timeout, input)

    commands.set_runner(counting)
    cluster = SLURMCluster(gpus_per_node=1, walltime="00:05:00", job_extra_directives=["--hold"],
                           poll_interval=0.5, log_directory=str(tmp_path / "logs"),
                           scheduler_options={"dashboard_address": "localhost:0"})
    try:
        cluster.scale(jobs=200)
        wait_for(lambda: sum(bool(j.job_id) for j in cluster.jobs) == 200, 120,
                 what="200 job ids")
        ids = {j.job_id for j in cluster.jobs}
        start = time.monotonic()
        time.sleep(5)
        polls = [argv for t, argv in calls if argv[0] == "squeue" and t >= start]
        # One squeue per 0.5 s interval (a slow call delays the next, never adds one) ...
        assert 5 <= len(polls) <= 11, len(polls)
        # ... each asking about all 200 jobs at once.
        asked = [next(w for w in a if w.startswith("--jobs=")) for a in polls]
        assert all(set(w.split("=", 1)[1].split(",")) == ids for w in asked)
        assert all(j.state == "pending" for j in cluster.jobs), cluster.job_table()
        before = len(calls)
        cluster.close()
        cancels = [argv for _, argv in calls[before:] if argv[0] == "scancel"]
        assert len(cancels) == 1 and set(cancels[0][1:]) == ids
    finally:
        commands.set_runner(None)
        cluster.close()
    out = subprocess.run(["squeue", "-h", "-j", ",".join(sorted(ids)), "-o", "%T"],
                         capture_output=True, text=True).stdout.split()
    assert set(out) <= {"CANCELLED"}, set(out)
