"""Reliability on the real local SLURM: walltime, lost jobs and workers, preemption signals."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter

import pytest
from distributed import Client, wait

from cluster_helpers import FAST, squeue_state
from conftest import wait_for
from reliability_helpers import lose_the_job_mid_chain, run_chain, runs, step
from hpcgpu import SLURMCluster
from hpcgpu.system.workers import scheduler_workers

pytestmark = pytest.mark.slurm


@pytest.fixture
def make(slurm, clusters):
    return lambda **options: clusters(SLURMCluster, **{**FAST, **options})


#: links of 1 s in the walltime test's chain: it outlasts the first job's retirement
#: (41-45 s after its start) by about 10 s, so that the chain goes on in the replacement
N_LINKS = 52


def test_walltime_retirement_hands_data_over_and_replaces_in_time(make, tmp_path):
    """A 1-minute job (SLURM's shortest walltime) under a 55 s computation: its workers
    retire ~41-45 s in, 15 s before SLURM's limit; the replacement (submitted ~16 s in, 25 s
    to start and connect) takes their data; nothing is lost or recomputed."""
    cluster = make(gpus_per_node=2, walltime="00:01:00", retire_before="15s",
                   lifetime_stagger="2s", replace_ahead="20s")
    assert "--walltime 60 --retire-before 15s --lifetime-stagger 2s" in cluster.job_script()
    cluster.adapt(minimum_jobs=1, maximum_jobs=1, interval="500ms")
    cluster.wait_for_workers(gpus=2, timeout=60)
    first = cluster.jobs[0]
    log = str(tmp_path / "runs.log")
    with Client(cluster) as client:
        futures = run_chain(client, N_LINKS, log, pause=1.0)
        results = client.gather(futures)
        assert results == [sum(range(i + 1)) for i in range(N_LINKS)]
        # The first job's workers left gracefully, before SLURM's time limit: COMPLETED,
        # not TIMEOUT, and its replacement was connected before they went.
        assert squeue_state(first.job_id) == "COMPLETED", cluster.job_table()
        names = [job.name for job in cluster.jobs]
        assert len(names) >= 2 and first.name in names
        assert any("nears its walltime" in e and first.name in e for e in cluster.events)
        workers = scheduler_workers(client).values()
        assert workers and all(not w["name"].startswith(first.name + "-") for w in workers)
    counts = runs(log)
    assert set(counts) == set(range(N_LINKS))
    # Data held by the retiring workers moved: nothing finished before was recomputed.
    # (At most the link running at the moment of each retirement can run twice; on a slow
    # machine the replacement job may retire too before the chain ends.)
    retired = {job.name for job in cluster.jobs if any("nears its walltime" in e and f"job {job.name} " in e
                                                      for e in cluster.events)}
    twice = [i for i, c in counts.items() if c > 1]
    assert len(twice) <= len(retired), (twice, retired, cluster.job_table())


def test_scancel_mid_computation_is_recomputed_and_replaced(make, tmp_path):
    cluster = make(gpus_per_node=2)
    first, ran = lose_the_job_mid_chain(
        cluster, str(tmp_path / "runs.log"), gpus=2, n=20, started=5,
        kill=lambda job_id: subprocess.run(["scancel", job_id], check=True))
    # Its results were lost with its workers and recomputed on the replacement.
    assert max(ran.values()) >= 2
    assert len(cluster.jobs) >= 2 and cluster.jobs[1].job_id
    assert any(first.name in e and "ended while its workers were connected" in e
               and "cancelled" in e for e in cluster.events), cluster.events
    assert first.name not in cluster.worker_spec


def test_worker_killed_outright_is_restarted_and_recomputed(make, tmp_path):
    cluster = make(gpus_per_node=2)
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=2, timeout=60)
    with Client(cluster) as client:
        data = client.map(lambda i: i * 10, range(10), pure=False)
        wait(data)
        pids = client.run(os.getpid)
        victim_address, victim_pid = next(iter(pids.items()))
        held = client.has_what()[victim_address]
        assert held, "the victim should hold some results"
        os.kill(victim_pid, signal.SIGKILL)
        assert client.submit(sum, data).result(timeout=60) == 450
        # The nanny restarted the worker process: back to two workers, same job.
        wait_for(lambda: len(scheduler_workers(client)) == 2, 60,
                 what="the nanny to restart the killed worker")
        assert victim_pid not in client.run(os.getpid).values()
    (job,) = cluster.jobs
    assert job.state == "running" and len(cluster.worker_spec) == 1


def test_usr1_drains_the_job_and_it_is_replaced(make, tmp_path):
    """scancel --signal=USR1 (what --signal=USR1@N sends before the walltime) retires the
    job's workers gracefully: their data moves, the job completes, adapt replaces it."""
    cluster = make(gpus_per_node=1, signal_before_walltime=60, requeue=True)
    script = cluster.job_script()
    assert "#SBATCH --signal=USR1@60" in script and "#SBATCH --requeue" in script
    cluster.adapt(minimum_jobs=2, maximum_jobs=2, interval="300ms")
    cluster.wait_for_workers(gpus=2, timeout=60)
    first = cluster.jobs[0]
    log = str(tmp_path / "runs.log")
    with Client(cluster) as client:
        data = [client.submit(step, 0, i, log, 0, key=f"held-{i}", workers=[w])
                for i, w in enumerate(sorted(scheduler_workers(client)))]
        wait(data)
        subprocess.run(["scancel", "--signal=USR1", first.job_id], check=True)
        wait_for(lambda: squeue_state(first.job_id) == "COMPLETED", 60,
                 what=f"the drained job to complete:\n{cluster.job_table()}")
        assert client.gather(data) == [0, 1]
        cluster.wait_for_workers(gpus=2, timeout=60)
    assert Counter(runs(log)) == Counter({0: 1, 1: 1})  # moved, not recomputed
    assert len(cluster.jobs) >= 3  # the drained job was replaced
