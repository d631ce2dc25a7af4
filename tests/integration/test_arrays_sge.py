"""Job arrays on the real local Grid Engine (8 slots, 4 GPUs as the consumable 'gpu')."""

from __future__ import annotations

import subprocess

import pytest

from array_helpers import (check_adapt_with_arrays, check_element_lost_mid_computation,
                           check_scale_up_one_array_then_down)
from cluster_helpers import FAST
from hpcgpu import SGECluster
from hpcgpu.jobspec.dialects import get_dialect

pytestmark = pytest.mark.sge


def array_of(job_id: str) -> str | None:
    """The job id under which Grid Engine's own ``qstat`` lists element ``job_id``."""
    out = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True).stdout
    listed = get_dialect("sge").parse_status(out)
    return job_id.split(".")[0] if job_id in listed else None


@pytest.fixture
def make(sge, clusters):
    # the local Grid Engine has 4 GPUs: 4 elements of one GPU each
    return lambda **options: clusters(SGECluster, **{**FAST, "profile": "sge-gpu", **options})


def test_sge_scale_gpus_4_is_one_array_then_2_retires_2_elements(make):
    cluster = make(gpus_per_node=1)
    check_scale_up_one_array_then_down(cluster, "sge", "qsub", gpus=4, keep=2,
                                       array_of=array_of)


def test_sge_element_deleted_mid_computation_is_recomputed_and_replaced(make):
    cluster = make(gpus_per_node=1)
    check_element_lost_mid_computation(
        cluster, gpus=3, cancel=lambda job_id: subprocess.run(["qdel", job_id], check=True))


def test_sge_adapt_grows_and_shrinks_with_arrays(make):
    cluster = make(gpus_per_node=1)
    check_adapt_with_arrays(cluster, "sge", "qsub", maximum=4)


def test_sge_site_limit_is_read_from_qconf(make):
    cluster = make(gpus_per_node=1)
    out = subprocess.run(["qconf", "-sconf"], capture_output=True, text=True).stdout
    (configured,) = [int(line.split()[1]) for line in out.splitlines()
                     if line.startswith("max_aj_tasks")]
    assert cluster.sync(cluster.fleet.arrays.site_limit) == (configured or None)
