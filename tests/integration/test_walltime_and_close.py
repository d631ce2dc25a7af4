"""A bare walltime that looks like seconds warns; close() after the scheduler died is prompt."""

from __future__ import annotations

import subprocess
import time
import warnings

import pytest
from hypothesis import given, strategies as st

from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import GPUJobShape, SLURMCluster
from hpcgpu.jobspec.units import AmbiguousWalltimeWarning, parse_walltime


@pytest.mark.parametrize("minutes", [1800, 3600, 7200, 86400])
def test_a_number_that_looks_like_seconds_warns_with_the_fix(minutes):
    with pytest.warns(AmbiguousWalltimeWarning, match=rf"walltime={minutes} is read as minutes .*"
                                                      rf"if you meant {minutes} seconds write walltime='"):
        shape = GPUJobShape.create(walltime=minutes)
    assert shape.walltime == minutes * 60  # still SLURM's reading: a warning, not a change


@given(st.integers(min_value=1, max_value=10**6))
def test_the_rule(minutes):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parse_walltime(minutes)
    assert bool(caught) == (minutes >= 1800 and minutes % 300 == 0)


@pytest.mark.parametrize("minutes", [30, 60, 90, 720, 1440, 2880, 10080])
def test_numbers_of_minutes_people_write_do_not_warn(minutes):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_walltime(minutes)
        parse_walltime("01:00:00")


@pytest.mark.slurm
def test_close_after_the_scheduler_died_is_prompt_and_cancels_the_job(slurm, clusters):
    cluster = clusters(SLURMCluster, gpus_per_node=1, **FAST)
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=1, timeout=120)
    (job_id,) = [job.job_id for job in cluster.jobs]
    cluster.sync(cluster.scheduler.close)
    started = time.monotonic()
    cluster.close()  # raises nothing
    assert time.monotonic() - started < 10
    wait_for(lambda: job_id not in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                                  text=True).stdout.split(), 60, what=f"job {job_id} to leave")
