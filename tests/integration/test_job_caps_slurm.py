"""Caps on queued and running jobs against the real local SLURM (4 nodes x 4 fake GPUs).

squeue is watched by a thread while the cluster scales past the caps: it must never list
more of the cluster's jobs pending (or running) than the cap, and the target is reached as
jobs start (queued cap) or stays throttled by the array's ``%N`` (running cap).
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import threading
import time
from contextlib import contextmanager

import pytest

from array_helpers import recorded_commands, submits
from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import SLURMCluster

pytestmark = pytest.mark.slurm


def squeue_states(job_name: str) -> list[str]:
    """States of this test's jobs (array elements one per line, ``-r``)."""
    out = subprocess.run(["squeue", "-h", "-r", "-n", job_name, "-o", "%T"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


@contextmanager
def watched(job_name: str):
    """The most PENDING, RUNNING and listed (ALIVE) jobs squeue showed at once while the
    block ran."""
    most = {"PENDING": 0, "RUNNING": 0, "ALIVE": 0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            states = squeue_states(job_name)
            for state in ("PENDING", "RUNNING"):
                most[state] = max(most[state], states.count(state))
            most["ALIVE"] = max(most["ALIVE"], len(states))
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield most
    finally:
        done.set()
        thread.join()


#: one job name per test: a test's squeue watch must not count the jobs an earlier test of
#: this process closed a moment ago (scancel returns before squeue stops listing them)
_TESTS = itertools.count()


@pytest.fixture
def make(slurm, clusters):
    name = f"caps{os.getpid()}-{next(_TESTS)}"
    make = lambda **options: clusters(SLURMCluster, **{  # noqa: E731
        **FAST, "gpus_per_node": 1, "job_name": name, **options})
    make.job_name = name
    return make


@pytest.fixture
def observed(make, caplog):
    """``with observed() as (calls, most):`` while the block runs, the cluster's warnings
    (in ``caplog``), the commands it runs and the most jobs squeue listed at once."""
    @contextmanager
    def observe():
        with caplog.at_level(logging.WARNING, logger="hpcgpu.cluster"), \
                recorded_commands() as calls, watched(make.job_name) as most:
            yield calls, most

    return observe


def said(caplog, part: str) -> list[str]:
    """The messages logged that hold ``part``."""
    return [r.getMessage() for r in caplog.records if part in r.getMessage()]


def test_queued_cap_holds_the_target_back_and_submits_as_jobs_start(make, observed, caplog):
    cluster = make(max_queued_jobs=2)
    with observed() as (calls, most):
        cluster.scale(jobs=5)
        cluster.wait_for_workers(gpus=5, timeout=120)
    assert most["PENDING"] <= 2, most
    assert len(submits(calls, "sbatch")) >= 3, submits(calls, "sbatch")  # 2 + 2 + 1 at most
    assert sorted(squeue_states(make.job_name)) == ["RUNNING"] * 5
    warned = said(caplog, "holds back")
    assert len(warned) == 1 and warned[0].startswith("max_queued_jobs=2 holds back"), warned


def test_running_cap_goes_out_as_one_throttled_array(make, observed, caplog):
    cluster = make(max_running_jobs=2)
    with observed() as (calls, most):
        cluster.scale(jobs=4)
        cluster.wait_for_workers(gpus=2, timeout=120)
        wait_for(lambda: sorted(squeue_states(make.job_name)) == ["PENDING"] * 2 + ["RUNNING"] * 2,
                 30, what="2 elements running, 2 pending behind the throttle")
        time.sleep(2)  # polls after the workers connected: still 2 running
    (sbatch,) = submits(calls, "sbatch")  # one array of 4, at most 2 running
    script = cluster.fleet.jobs[cluster.jobs[0].name].submission.template.job_script()
    assert "#SBATCH --array=0-3%2" in script
    assert most["RUNNING"] <= 2, most
    reasons = subprocess.run(["squeue", "-h", "-r", "-n", make.job_name, "-t", "PD", "-o", "%r"],
                             capture_output=True, text=True).stdout.split()
    assert set(reasons) == {"JobArrayTaskLimit"}, reasons
    assert said(caplog, "max_running_jobs") == [
        "max_running_jobs=2: the 4 new jobs go out as one array, at most 2 of them running at "
        "once; the others wait in the scheduler's queue"]


def test_a_cap_above_the_site_ceiling_is_refused_before_anything_starts(make):
    import dask

    with dask.config.set({"hpcgpu.profiles.capped": {"scheduler": "slurm",
                                                     "max-running-jobs": 3}}):
        with recorded_commands() as calls:
            with pytest.raises(ValueError, match=r"max_running_jobs=8 is above the site's "
                               r"ceiling max_running_jobs=3 \(profile 'capped'"):
                make(profile="capped", max_running_jobs=8)
    assert not submits(calls, "sbatch")


def test_adapt_under_a_running_cap_with_plain_jobs_says_so_once(make, observed, caplog):
    cluster = make(max_running_jobs=2, job_arrays=False)
    with observed() as (_, most):
        cluster.adapt(minimum_jobs=4, maximum_jobs=4, interval="200ms")
        cluster.wait_for_workers(gpus=2, timeout=120)
        time.sleep(3)  # adapt's ticks and the monitor's polls go on: no more jobs, no more lines
        assert sorted(squeue_states(make.job_name)) == ["RUNNING"] * 2
    assert most["ALIVE"] <= 2, most  # plain jobs: none beyond the cap waits in the queue
    assert said(caplog, "holds back") == [
        "max_running_jobs=2 holds back new jobs: 2 submitted now; the other 2 of the target "
        "wait here and are submitted as running jobs end"]
