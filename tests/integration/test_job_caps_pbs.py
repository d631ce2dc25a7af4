"""A running cap on the real OpenPBS (2 vnodes of 4 fake GPUs), whose arrays (``-J``) take
no throttle: only the jobs the cap allows are submitted, the rest wait in this process. The
jobs are held (``-h``): what counts here is what goes into PBS's queue, not the workers."""

from __future__ import annotations

import logging
import time

import pytest

from array_helpers import recorded_commands, submits
from cluster_helpers import FAST, pbs_alive
from hpcgpu import PBSCluster

pytestmark = pytest.mark.pbs


def test_pbs_running_cap_submits_only_what_may_run(pbs, clusters, caplog):
    cluster = clusters(PBSCluster, **{**FAST, "gpus_per_node": 1, "max_running_jobs": 2,
                                      "job_extra_directives": ["-h"]})
    with caplog.at_level(logging.WARNING, logger="hpcgpu.cluster"), \
            recorded_commands() as calls:
        cluster.scale(jobs=3)
        deadline = time.monotonic() + 30
        while not (len(cluster.jobs) == 2 and all(j.state == "pending" for j in cluster.jobs)):
            assert time.monotonic() < deadline, cluster.job_table()
            time.sleep(0.2)
        time.sleep(2)  # polls go on: nothing more goes out while the 2 may still run
    (qsub,) = submits(calls, "qsub")  # one array of the 2 jobs the cap allows, no -J throttle
    ids = [job.job_id for job in cluster.jobs]
    assert len(ids) == 2 and all(pbs_alive(job_id) for job_id in ids), cluster.job_table()
    said = [r.getMessage() for r in caplog.records if "holds back" in r.getMessage()]
    assert said == ["max_running_jobs=2 holds back new jobs: 2 submitted now; the other 1 of "
                    "the target wait here and are submitted as running jobs end"], said
