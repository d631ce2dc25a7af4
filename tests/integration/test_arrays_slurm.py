"""Job arrays on the real local SLURM (4 fake nodes x 4 fake GPUs)."""

from __future__ import annotations

import subprocess

import pytest

from array_helpers import (check_adapt_with_arrays, check_element_lost_mid_computation,
                           check_scale_up_one_array_then_down, recorded_commands, submits)
from cluster_helpers import FAST, squeue_state
from conftest import wait_for
from hpcgpu import SLURMCluster
from hpcgpu.cluster.batch.walltime_planner import GATHER_WINDOW
from hpcgpu.system.workers import scheduler_workers

pytestmark = pytest.mark.slurm


@pytest.fixture
def make(slurm, clusters):
    return lambda **options: clusters(SLURMCluster, **{**FAST, **options})


def test_scale_gpus_6_is_one_array_then_2_retires_4_elements(make):
    cluster = make(gpus_per_node=1)
    assert "--array" not in cluster.job_script()
    check_scale_up_one_array_then_down(cluster, "slurm", "sbatch", gpus=6, keep=2,
                                       array_of=lambda job_id: squeue_state(job_id, "%F"))


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
    limit = cluster.sync(cluster.fleet.arrays.site_limit)
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    assert f"MaxArraySize            = {limit}" in out


def test_walltime_replacement_per_element_is_one_new_array(make):
    """Three elements started together near their walltime together: each is marked retiring
    and replaced, the three replacements in one sbatch; the old elements end by themselves
    (COMPLETED, not TIMEOUT) once their workers retired, and the work goes on. A 1-minute
    walltime (SLURM's shortest): replaced ~16 s in, retired ~36-40 s in."""
    cluster = make(gpus_per_node=1, walltime="00:01:00", retire_before="20s",
                   lifetime_stagger="2s", replace_ahead="15s")
    cluster.scale(gpus=3)
    cluster.wait_for_workers(gpus=3, timeout=120)
    first = {job.name: job.job_id for job in cluster.jobs}
    with recorded_commands() as calls:
        wait_for(lambda: len(cluster.jobs) == 6 and all(j.job_id for j in cluster.jobs), 120,
                 interval=1, what=f"three replacements:\n{cluster.job_table()}")
    # One submit for the elements seen running within GATHER_WINDOW of each other (on a busy
    # SLURM an element can start later than the others: its replacement then goes alone).
    starts = sorted(cluster.fleet.records[name].started for name in first)
    groups = 1 + sum(later - starts[0] > GATHER_WINDOW for later in starts[1:])
    sbatches = submits(calls, "sbatch")
    retried = [stderr for argv, stderr in calls.failed if argv[0] == "sbatch"]  # a busy slurmctld
    assert 1 <= len(sbatches) - len(retried) <= groups, (sbatches, starts, retried)
    new = [job for job in cluster.jobs if job.name not in first]
    submitted: dict[str, list[str]] = {}  # sbatch's job id -> the ids of its jobs
    for job in new:
        submitted.setdefault(job.job_id.split("_")[0], []).append(job.job_id)
    assert len(submitted) == len(sbatches) - len(retried), (submitted, sbatches)
    # several replacements at once are one array; one alone (an element that started apart)
    # is a plain job, as any single new job is (hpcgpu.cluster.batch.arrays)
    assert all("_" in i for ids in submitted.values() if len(ids) > 1 for i in ids), submitted
    assert all("_" not in ids[0] for ids in submitted.values() if len(ids) == 1), submitted
    for name in first:
        assert any("nears its walltime" in e and f"job {name} " in e for e in cluster.events)
    wait_for(lambda: all(squeue_state(job_id) == "COMPLETED" for job_id in first.values()), 90,
             interval=1, what=f"the old elements to end by themselves:\n{cluster.job_table()}")
    cluster.wait_for_workers(gpus=3, timeout=60)
    with cluster.get_client() as client:
        assert client.submit(lambda: 6 * 7).result() == 42
        names = {w["name"].rsplit("-", 2)[0] for w in scheduler_workers(client).values()}
    # The work goes on in the replacements only. The replacements, with the same 1-minute
    # walltime, may near theirs before this line and be replaced in turn.
    assert names and names.isdisjoint(first), names
    assert names <= {job.name for job in cluster.jobs} - set(first), (names, cluster.job_table())

