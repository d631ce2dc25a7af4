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


def replaced(cluster, first: dict[str, str]):
    """``(jobs, names of the jobs replaced)`` once each of ``first`` was and every replacement
    has its job id, else None; read on the cluster's loop, which applies a replacement and
    tells it in one step, so the two agree."""
    async def view():
        return cluster.jobs, list(cluster.events)
    jobs, events = cluster.sync(view)
    retired = [e.split()[1] for e in events if "nears its walltime" in e]
    done = set(first) <= set(retired) and len(jobs) == len(first) + len(retired)
    return (jobs, retired) if done and all(job.job_id for job in jobs) else None


def test_walltime_replacement_per_element_is_one_new_array(make):
    """Three elements started together near their walltime together: each is marked retiring
    and replaced, the three replacements in one sbatch; the old elements end by themselves
    (COMPLETED, not TIMEOUT) once their workers retired, and the work goes on. A 1-minute
    walltime (SLURM's shortest): replaced ~21 s in, retired ~36-40 s in."""
    cluster = make(gpus_per_node=1, walltime="00:01:00", retire_before="20s",
                   lifetime_stagger="2s", replace_ahead="15s")
    # Recorded from the start: on a busy SLURM an element can start so late that the others'
    # replacements go out before its worker connects, and replacements of replacements
    # (same 1-minute walltime) beside its own.
    with recorded_commands() as calls:
        cluster.scale(gpus=3)
        cluster.wait_for_workers(gpus=3, timeout=120)
        first = {job.name: job.job_id for job in cluster.jobs[:3]}  # oldest first
        view = wait_for(lambda: replaced(cluster, first), 120, interval=1,
                        what=f"three replacements:\n{cluster.job_table()}")
    jobs, retired = view
    assert set(first) <= set(retired), (first, retired)
    # One submit for the jobs seen running within GATHER_WINDOW of the first due (on a busy
    # SLURM an element can start later than the others: its replacement then goes apart).
    groups, anchor = 0, None
    for started in sorted(cluster.fleet.records[name].started for name in retired):
        if anchor is None or started - anchor > GATHER_WINDOW:
            groups, anchor = groups + 1, started
    sbatches = submits(calls, "sbatch")
    retried = [stderr for argv, stderr in calls.failed if argv[0] == "sbatch"]  # a busy slurmctld
    initial = len({job_id.split("_")[0] for job_id in first.values()})
    replacing = len(sbatches) - len(retried) - initial
    assert 1 <= replacing <= groups, (sbatches, retired, retried)
    submitted: dict[str, list[str]] = {}  # sbatch's job id -> the ids of its jobs
    for job in jobs[len(first):]:
        submitted.setdefault(job.job_id.split("_")[0], []).append(job.job_id)
    assert len(submitted) == replacing, (submitted, sbatches)
    # several replacements at once are one array; one alone (an element that started apart)
    # is a plain job, as any single new job is (hpcgpu.cluster.batch.arrays)
    assert all("_" in i for ids in submitted.values() if len(ids) > 1 for i in ids), submitted
    assert all("_" not in ids[0] for ids in submitted.values() if len(ids) == 1), submitted
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

