"""Faults of the user's input and of the batch scheduler: each ends in a clear message, fast.

Real SLURM and Grid Engine; a dead controller is simulated faithfully by pointing the SLURM
client at a copy of slurm.conf whose SlurmctldPort nobody listens on (stopping the shared
slurmctld would break other tests running at the same time).
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
from pathlib import Path

import dask
import pytest

from cluster_helpers import FAST, recorded_commands
from conftest import wait_for
from hpcgpu import SGECluster, SLURMCluster


@pytest.fixture
def calls():
    """Every scheduler command hpcgpu runs, through the hpcgpu.system.commands seam."""
    with recorded_commands() as seen:
        yield seen


@pytest.fixture
def make(slurm, clusters):
    return lambda cls=SLURMCluster, **options: clusters(cls, **{**FAST, **options})


def dead_controller_conf(tmp_path: Path) -> str:
    """A copy of the real slurm.conf whose controller port has no listener (and a short
    MessageTimeout, so that each client call gives up in seconds rather than ~20 s)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free now, and nothing will listen on it
    directory = tmp_path / "dead-slurm"
    directory.mkdir()
    for path in Path("/etc/slurm").glob("*.conf"):
        shutil.copy(path, directory / path.name)
    conf = directory / "slurm.conf"
    lines = [line for line in conf.read_text().splitlines()
             if not line.startswith(("SlurmctldPort=", "MessageTimeout="))]
    conf.write_text("\n".join(lines + [f"SlurmctldPort={port}", "MessageTimeout=2"]) + "\n")
    return str(conf)


@pytest.mark.parametrize("options, match", [
    ({"walltime": "soon"}, "walltime='soon'"),
    ({"memory_per_gpu": "lots"}, "memory_per_gpu='lots'"),
    ({"nodes": -1}, "nodes=-1"),
    ({"walltime": "00:02:00", "retire_before": "90s"}, "retire_before='90s'"),
    ({"signal_before_walltime": "soon"}, "signal_before_walltime='soon'"),
])
def test_wrong_shape_values_fail_before_any_command(slurm, tmp_path, calls, options, match):
    with pytest.raises(ValueError, match=match):
        SLURMCluster(log_directory=str(tmp_path), **options)
    assert calls == []


def test_unknown_partition_is_refused_before_submitting(make, calls):
    """sbatch would take the job script and refuse only at scale(); the check says it first,
    with the partitions that can run the job (#43 item 3)."""
    with pytest.raises(ValueError, match="queue='nope' is not a partition of this SLURM cluster "
                                         r"\(sinfo lists them\); partitions that exist and can "
                                         "run this job: debug, gpu, hidden"):
        make(gpus_per_node=1, queue="nope")
    assert {argv[0] for argv in calls} == {"sinfo"}


def test_a_partition_the_check_cannot_see_surfaces_sbatchs_own_words(make, calls):
    cluster = make(gpus_per_node=1, job_extra_directives=["--partition=nope"])
    start = time.monotonic()
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match="invalid partition specified: nope"):
        cluster.wait_for_workers(gpus=1, timeout=60)
    assert time.monotonic() - start < 15
    assert len([c for c in calls if c[0] == "sbatch"]) == 1  # not retried: not transient
    assert cluster.jobs[0].state == "failed"


def test_sge_unknown_project_surfaces_its_words(sge, make):
    cluster = make(SGECluster, gpus_per_node=1, account="nope")
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match='project "nope" does not exist'):
        cluster.wait_for_workers(gpus=1, timeout=30)


def test_sge_unknown_queue_is_refused_before_submitting(sge, make, calls):
    """qsub would say 'unknown queue "nope"'; the queue check says it first, with the fix."""
    with pytest.raises(ValueError, match="queue='nope' is not a Grid Engine cluster queue "
                                         r"\(qconf -sql lists them\); queues that exist and "
                                         "can run this job: all.q"):
        make(SGECluster, gpus_per_node=1, queue="nope")
    assert "qsub" not in {argv[0] for argv in calls}


def test_script_the_scheduler_rejects(make):
    cluster = make(gpus_per_node=1, job_extra_directives=["--gpus=99"])
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match=r"Invalid generic resource \(gres\) specification"):
        cluster.wait_for_workers(gpus=1, timeout=30)


def test_missing_submit_command(make, monkeypatch, tmp_path):
    cluster = make(gpus_per_node=1)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match="sbatch: command not found.*add sbatch to PATH"):
        cluster.wait_for_workers(gpus=1, timeout=30)


def test_dead_controller_bounded_retries_then_clear_error_then_recovery(
        make, monkeypatch, tmp_path, calls, caplog):
    cluster = make(gpus_per_node=1)
    monkeypatch.setenv("SLURM_CONF", dead_controller_conf(tmp_path))
    start = time.monotonic()
    with dask.config.set({"hpcgpu.submit-retries": 2, "hpcgpu.submit-backoff": "0.5s"}):
        cluster.scale(jobs=1)
        with pytest.raises(RuntimeError, match="Unable to contact slurm controller") as error:
            cluster.wait_for_workers(gpus=1, timeout=60)
    assert "gave up after 3 attempts" in str(error.value)
    assert 1.4 < time.monotonic() - start < 30  # backoff 0.5 + 1 s, bounded
    assert len([c for c in calls if c[0] == "sbatch"]) == 3
    # The controller comes back: a retry in flight succeeds, and the cluster works.
    caplog.set_level(logging.WARNING, logger="hpcgpu.cluster")
    threading.Timer(1.0, monkeypatch.delenv, args=("SLURM_CONF",)).start()
    with dask.config.set({"hpcgpu.submit-retries": 4, "hpcgpu.submit-backoff": "0.5s"}):
        cluster.scale(jobs=1)
        cluster.wait_for_workers(gpus=1, timeout=60)
    assert "succeeded on attempt" in caplog.text


def test_dead_controller_while_polling_keeps_the_jobs(make, monkeypatch, tmp_path, caplog):
    cluster = make(gpus_per_node=1)
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=1, timeout=60)
    caplog.set_level(logging.WARNING, logger="hpcgpu.cluster")
    monkeypatch.setenv("SLURM_CONF", dead_controller_conf(tmp_path))
    wait_for(lambda: "job status unknown" in caplog.text, 10, what="the failed poll warning")
    time.sleep(4 * FAST["poll_interval"])
    (job,) = cluster.jobs
    assert job.state == "running" and job.name in cluster.worker_spec  # not read as ended
    monkeypatch.delenv("SLURM_CONF")
    wait_for(lambda: "job status available again" in caplog.text, 10, what="recovery")
    assert cluster.jobs[0].state == "running" and len(cluster.jobs) == 1


def test_workers_that_cannot_reach_the_scheduler_fail_within_death_timeout(make):
    # The scheduler tells the workers an address of this host where nothing listens: a port
    # bound, never listened on, so that every connection is refused and no other process can
    # take it. (Never an address off this machine: the test's packets stay on it.)
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        cluster = make(gpus_per_node=1, death_timeout=10, max_failed_jobs=1, scheduler_options={
            "dashboard_address": "localhost:0",
            "contact_address": f"tls://127.0.0.1:{hole.getsockname()[1]}"})
        start = time.monotonic()
        cluster.scale(jobs=1)
        with pytest.raises(RuntimeError, match="ended before their workers connected") as error:
            cluster.wait_for_workers(gpus=1, timeout=90)
    assert time.monotonic() - start < 60
    assert "Timed out starting worker" in str(error.value)  # the job's own stderr
