"""LSFCluster through command shims that run its real scripts under SLURM.

tests/shims/lsf (bsub/bjobs/bkill) translate the scripts' own #BSUB directives to sbatch
options, refuse directives they do not know, and answer in LSF's output formats
(``bjobs -json``). What this does and does not verify: docs/cluster.md. PBSCluster runs
against the real OpenPBS instead (test_cluster_pbs.py).
"""

from __future__ import annotations

import pytest

from cluster_helpers import (check_adapt, check_failing_job_reported,
                             check_scale_up_and_down, shim_cluster, slurm_alive)  # noqa: F401 (the make fixture)

pytestmark = pytest.mark.slurm


def test_shim_scale_up_and_down(make):
    cluster = make(gpus_per_node=2)
    assert '#BSUB -gpu "num=2' in cluster.job_script()
    check_scale_up_and_down(cluster, gpus_per_job=2, jobs=2, job_alive=slurm_alive)


def test_shim_adapt(make):
    cluster = make(gpus_per_node=2)
    check_adapt(cluster, gpus_per_job=2, max_jobs=2)


def test_shim_failing_job_reported_with_stderr(make):
    cluster = make(gpus_per_node=1, python="/nonexistent/bin/python3", max_failed_jobs=1)
    check_failing_job_reported(cluster, within=60)
    (job,) = cluster.jobs
    # the job script's python check ends it (exit 2), saying what to do (#43)
    assert job.state == "failed" and job.exit_code == 2
    assert "/nonexistent/bin/python3 (not found) on " in job.stderr_tail and "name theirs with python=" in job.stderr_tail
