"""Job arrays on the real local SLURM (4 fake nodes x 4 fake GPUs)."""

from __future__ import annotations

import subprocess

import pytest

from array_helpers import (check_adapt_with_arrays, check_element_lost_mid_computation,
                           check_scale_up_one_array_then_down, recorded_commands, submits)
from cluster_helpers import FAST
from hpcgpu import SLURMCluster

pytestmark = pytest.mark.slurm


def array_of(job_id: str) -> str:
    """The array job id SLURM itself reports for a job (``squeue -o %F``)."""
    return subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%F"],
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def make(slurm, clusters):
    return lambda **options: clusters(SLURMCluster, **{**FAST, **options})


def test_scale_gpus_6_is_one_array_then_2_retires_4_elements(make):
    cluster = make(gpus_per_node=1)
    assert "--array" not in cluster.job_script()
    check_scale_up_one_array_then_down(cluster, "slurm", "sbatch", gpus=6, keep=2,
                                       array_of=array_of)


def test_element_cancelled_mid_computation_is_recomputed_and_replaced(make):
    cluster = make(gpus_per_node=1)
    check_element_lost_mid_computation(
        cluster, gpus=3, cancel=lambda job_id: subprocess.run(["scancel", job_id], check=True))


def test_adapt_grows_and_shrinks_with_arrays(make):
    cluster = make(gpus_per_node=1)
    check_adapt_with_arrays(cluster, "slurm", "sbatch", maximum=4)


def test_site_limit_splits_a_scale_up_and_job_arrays_false_turns_it_off(make):
    cluster = make(gpus_per_node=1, max_array_size=2, array_throttle=1)
    with recorded_commands() as calls:
        cluster.scale(jobs=5)
        cluster.wait_for_workers(gpus=1, timeout=120)
    sbatch = submits(calls, "sbatch")
    assert len(sbatch) == 3  # 2 + 2 + 1 elements
    assert sorted(job.job_id.count("_") for job in cluster.jobs) == [0, 1, 1, 1, 1]
    plain = make(gpus_per_node=1, job_arrays=False)
    with recorded_commands() as calls:
        plain.scale(jobs=2)
        plain.wait_for_workers(gpus=2, timeout=120)
    assert len(submits(calls, "sbatch")) == 2
    assert all("_" not in job.job_id for job in plain.jobs)


def test_site_limit_is_read_from_scontrol(make):
    cluster = make(gpus_per_node=1)
    limit = cluster.sync(cluster._site_array_limit)
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    assert f"MaxArraySize            = {limit}" in out
