"""Job arrays of PBSCluster and LSFCluster through the command shims (tests/shims), which run
the real array scripts under the local SLURM: ``-J 0-K`` / ``-J "name[1-K]"`` become
``sbatch --array``, and the shims answer with PBS Pro's and LSF's element ids."""

from __future__ import annotations

import pytest

from array_helpers import check_scale_up_one_array_then_down
from cluster_helpers import shim_cluster, squeue_state  # noqa: F401 (the make fixture)
from hpcgpu.jobspec.dialects.arrays import element_index

pytestmark = pytest.mark.slurm
SUBMIT = {"pbs": "qsub", "lsf": "bsub"}  # the script on standard input


def test_shim_scale_up_is_one_array_then_elements_retire(make):
    scheduler = make.scheduler

    def array_of(job_id: str) -> str | None:
        out = squeue_state(job_id, "%F")
        array_id = element_index(scheduler, job_id)[0]
        return array_id if out and array_id.startswith(out) else None

    cluster = make(gpus_per_node=1)
    check_scale_up_one_array_then_down(cluster, scheduler, SUBMIT[scheduler], gpus=4, keep=2,
                                       array_of=array_of)
