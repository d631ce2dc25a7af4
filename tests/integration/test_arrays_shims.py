"""Job arrays of LSFCluster through the command shims (tests/shims/lsf), which run the real
array scripts under the local SLURM: ``-J "name[1-K]"`` becomes ``sbatch --array``, and the
shims answer with LSF's element ids. PBS arrays (``qsub -J``) run on the real OpenPBS
(test_cluster_pbs.py)."""

from __future__ import annotations

import pytest

from array_helpers import check_scale_up_one_array_then_down
from cluster_helpers import shim_cluster, squeue_state  # noqa: F401 (the make fixture)
from hpcgpu.jobspec.dialects.arrays import element_index

pytestmark = pytest.mark.slurm
SUBMIT = {"lsf": "bsub"}  # the script on standard input


def test_shim_scale_up_is_one_array_then_elements_retire(make):
    scheduler = make.scheduler

    def array_of(job_id: str) -> str | None:
        out = squeue_state(job_id, "%F")
        array_id = element_index(scheduler, job_id)[0]
        return array_id if out and array_id.startswith(out) else None

    cluster = make(gpus_per_node=1)
    check_scale_up_one_array_then_down(cluster, scheduler, SUBMIT[scheduler], gpus=4, keep=2,
                                       array_of=array_of)
