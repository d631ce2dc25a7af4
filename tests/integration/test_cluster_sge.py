"""Cluster mode on the real local Grid Engine (8 slots, consumable 'gpu' per slot)."""

from __future__ import annotations

import pytest

from cluster_helpers import FAST, check_adapt, check_failing_job_reported, check_scale_up_and_down, sge_alive
from hpcgpu import SGECluster

pytestmark = pytest.mark.sge


@pytest.fixture
def make(sge, clusters):
    return lambda **options: clusters(SGECluster, **{**FAST, **options})


def test_sge_scale_gpus_4_then_2(make):
    cluster = make(gpus_per_node=2, profile="sge-gpu")
    assert "#$ -pe smp 2" in cluster.job_script() and "#$ -l gpu=1" in cluster.job_script()
    check_scale_up_and_down(cluster, gpus_per_job=2, jobs=2, job_alive=sge_alive)


def test_sge_adapt_from_zero_and_back(make):
    cluster = make(gpus_per_node=2)
    check_adapt(cluster, gpus_per_job=2, max_jobs=2)


def test_sge_job_failing_at_start_is_reported(make):
    cluster = make(gpus_per_node=1, python="/nonexistent/bin/python3", max_failed_jobs=1)
    # bounded: qacct and the 2-core machine's load make SGE slower than SLURM here
    check_failing_job_reported(cluster, within=120)
