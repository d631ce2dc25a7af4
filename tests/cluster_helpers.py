"""The cluster-mode checks, shared by the SLURM, SGE, PBS and LSF-shim tests."""

from __future__ import annotations

import os
import re
import subprocess
import time
from contextlib import contextmanager
from operator import add
from pathlib import Path

import pytest
from distributed import Client

from conftest import wait_for
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.system import commands
from hpcgpu.system.workers import scheduler_workers

FAST = dict(walltime="00:10:00", death_timeout=60, poll_interval=0.5,
            scheduler_options={"dashboard_address": "localhost:0"})
SHIMS = Path(__file__).parent / "shims"



def squeue_state(job_id: str, field: str = "%T") -> str:
    """SLURM's state of a job (or another ``squeue -o`` field), "" once it has left; the PBS
    and LSF shims' ids (``123.shim``, an array element ``123[4]``) name SLURM's ``123``, ``123_4``."""
    slurm_id = re.sub(r"\[(\d+)\]", r"_\1", job_id.split(".")[0])
    return subprocess.run(["squeue", "-h", "--states=all", "-j", slurm_id, "-o", field],
                          capture_output=True, text=True).stdout.strip()


def slurm_alive(job_id: str) -> bool:
    return squeue_state(job_id) in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


def sge_alive(job_id: str) -> bool:
    """Whether Grid Engine's qstat still lists the job (or the array element ``123.4``)."""
    out = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True).stdout
    return job_id in get_dialect("sge").parse_status(out)


def pbs_alive(job_id: str) -> bool:
    """Whether PBS's job (or array element) has not finished (``qstat -x``: job history)."""
    out = subprocess.run(["qstat", "-x", "-f", "-F", "json", job_id], capture_output=True,
                         text=True).stdout
    status = get_dialect("pbs").parse_status(out).get(job_id)
    return status is not None and not status.finished


class RecordedCalls(list):
    """The argvs run, in order; ``failed``: (argv, stderr) of those that exited non-zero
    (a submit that failed transiently and was retried is two calls, one of them failed)."""

    def __init__(self):
        super().__init__()
        self.failed: list[tuple[list[str], str]] = []


@pytest.fixture(name="commands")
def answered_commands():
    """The subprocess seam without a scheduler: records each argv in ``ran`` and answers
    from ``answers`` (``argv[0]`` -> ``(exit code, stdout)``; ``(0, "")`` otherwise)."""
    from types import SimpleNamespace

    ran, answers = [], {}

    def runner(argv, timeout, input):
        ran.append(list(argv))
        code, out = answers.get(argv[0], (0, ""))
        return commands.CommandResult(tuple(argv), code, out, "")

    commands.set_runner(runner)
    yield SimpleNamespace(ran=ran, answers=answers)
    commands.set_runner(None)


@contextmanager
def recorded_commands():
    """Every argv the cluster runs through hpcgpu's one subprocess seam, in order."""
    calls = RecordedCalls()
    real = commands.runner

    def record(argv, timeout, input):
        calls.append(list(argv))
        result = real(argv, timeout, input)
        if result.returncode != 0:
            calls.failed.append((list(argv), result.stderr.strip()))
        return result

    commands.set_runner(record)
    try:
        yield calls
    finally:
        commands.set_runner(None)


@pytest.fixture(params=["lsf"], name="make")
def shim_cluster(request, slurm, monkeypatch, clusters):
    """``make(**options)``: an LSFCluster whose bsub/bjobs/bkill are the shims (PBS runs on
    the real OpenPBS: tests/integration/test_cluster_pbs.py).

    monkeypatch comes first: its PATH is undone only after the clusters have closed (their
    cancels must reach the shims, not a real qdel)."""
    from hpcgpu import LSFCluster

    name, cls = request.param, {"lsf": LSFCluster}[request.param]
    monkeypatch.setenv("PATH", f"{SHIMS / name}{os.pathsep}{os.environ['PATH']}")

    def make(**options):
        return clusters(cls, **{**FAST, "launcher": "direct", **options})

    make.scheduler = name
    return make


def gpu_placement(client: Client) -> dict[str, dict]:
    """Worker name -> what its preload recorded in ``WorkerState.extra["hpcgpu"]``."""
    return client.run_on_scheduler(
        lambda dask_scheduler: {str(ws.name): ws.extra.get("hpcgpu")
                                for ws in dask_scheduler.workers.values()}
    )


def check_scale_up_and_down(cluster, gpus_per_job: int, jobs: int, job_alive) -> None:
    """scale(gpus=jobs*G): all workers connect on distinct GPUs, compute, then scale to one
    job: exactly one job's workers retire together and that job leaves the scheduler."""
    total = jobs * gpus_per_job
    cluster.scale(gpus=total)
    cluster.wait_for_workers(gpus=total, timeout=120)
    # every running job shows its nodes as the scheduler gives them (one poll at most)
    wait_for(lambda: all(j.nodes for j in cluster.jobs if j.state == "running"), 10,
             what="the running jobs' nodes")
    with Client(cluster) as client:
        placement = gpu_placement(client)
        assert len(placement) == total
        slots = {(p["hostname"], p["job_id"], p["cuda_visible_devices"]) for p in placement.values()}
        assert len(slots) == total, placement
        for name, p in placement.items():
            assert "," not in p["cuda_visible_devices"], (name, p)
        devices = {(p["job_id"], p["cuda_visible_devices"]) for p in placement.values()}
        assert len(devices) == total
        assert sorted(name.rsplit("-", 2)[0] for name in placement) == sorted(
            [job.name for job in cluster.jobs] * gpus_per_job)
        futures = client.map(lambda x: x * x, range(200))
        assert client.submit(sum, futures).result() == sum(x * x for x in range(200))
        del futures
        first = {job.name: job.job_id for job in cluster.jobs}
        cluster.scale(gpus=gpus_per_job)
        wait_for(lambda: len(scheduler_workers(client)) == gpus_per_job, 60,
                 what="one job's workers to remain")
        remaining = {name.rsplit("-", 2)[0] for name in gpu_placement(client)}
        assert len(remaining) == 1
        gone = [job_id for name, job_id in first.items() if name not in remaining]
        assert len(gone) == jobs - 1
        wait_for(lambda: not any(job_alive(j) for j in gone), 60, what="the job to leave")
        assert client.submit(add, 1, 2).result() == 3


def check_adapt(cluster, gpus_per_job: int, max_jobs: int) -> None:
    """adapt from 0 under a real workload up to max_jobs, right answer, back to 0, no loop."""
    cluster.adapt(minimum_gpus=0, maximum_gpus=max_jobs * gpus_per_job, interval="300ms",
                  wait_count=3, target_duration="1s")
    with Client(cluster) as client:
        futures = client.map(lambda x: (time.sleep(0.4), x + 1)[1], range(60))
        assert client.submit(sum, futures).result() == sum(range(1, 61))
        peak = len(cluster.worker_spec)
        del futures
        wait_for(lambda: not cluster.worker_spec and not scheduler_workers(client),
                 120, interval=0.5, what="adapt to scale back to 0")
    submitted = [job for job in cluster.jobs if job.job_id]
    # No submit/cancel loop: never more jobs than the maximum over the whole run.
    assert 1 <= len(submitted) <= max_jobs, cluster.job_table()
    assert peak >= 1
    wait_for(lambda: all(job.state in ("cancelled", "completed") for job in cluster.jobs), 30,
             what=f"the jobs to end:\n{cluster.job_table()}")


def check_failing_job_reported(cluster, within: float) -> str:
    """One job whose Python does not exist: waiting for its worker fails within ``within``
    seconds, naming the command that failed. Returns the error message."""
    start = time.monotonic()
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match="ended before their workers connected") as error:
        cluster.wait_for_workers(gpus=1, timeout=120)
    assert time.monotonic() - start < within
    assert "/nonexistent/bin/python3" in str(error.value)
    return str(error.value)
