"""A running cap on the real local Grid Engine (4 GPUs as the consumable 'gpu'): the new
jobs go out as one array with ``-tc``, and qstat never shows more of them running."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from array_helpers import recorded_commands, submits
from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import SGECluster
from hpcgpu.jobspec.dialects import get_dialect

pytestmark = pytest.mark.sge


def states(cluster) -> list[str]:
    """qstat's states of the cluster's jobs (array elements one each)."""
    out = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True).stdout
    listed = get_dialect("sge").parse_status(out)
    return sorted(listed[j.job_id].state for j in cluster.jobs if j.job_id in listed)


def test_sge_running_cap_is_one_array_with_tc(sge, clusters):
    cluster = clusters(SGECluster, **{**FAST, "profile": "sge-gpu", "gpus_per_node": 1,
                                      "max_running_jobs": 2})
    most, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            most[0] = max(most[0], states(cluster).count("running"))
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        with recorded_commands() as calls:
            cluster.scale(jobs=3)
            cluster.wait_for_workers(gpus=2, timeout=120)
            wait_for(lambda: states(cluster) == ["pending", "running", "running"], 30,
                     what=f"2 elements running, 1 waiting behind -tc 2: {states(cluster)}")
            time.sleep(2)  # the scheduler's next passes: still 2 running
    finally:
        done.set()
        thread.join()
    (qsub,) = submits(calls, "qsub")  # one array of 3 elements, at most 2 running
    script = cluster.fleet.jobs[cluster.jobs[0].name].submission.template.job_script()
    assert "#$ -t 1-3" in script and "#$ -tc 2" in script, script
    assert most[0] == 2, most
