"""FluxCluster through a command shim that runs its real scripts under SLURM.

tests/shims/flux/flux (batch/jobs/cancel, and run inside the job) translates the scripts' own
#FLUX: directives to sbatch options, refuses directives it does not know, answers in
``flux jobs --format`` lines, and starts ``flux run``'s tasks with srun and Flux's task
variables. What this does and does not verify: docs/schedulers.md.
"""

from __future__ import annotations

import os

import pytest
from distributed import Client

from cluster_helpers import FAST, SHIMS, check_failing_job_reported, gpu_placement, slurm_alive
from conftest import wait_for
from hpcgpu.system.workers import scheduler_workers

pytestmark = pytest.mark.slurm


@pytest.fixture
def make(slurm, monkeypatch, clusters):
    """``make(**options)``: a FluxCluster whose flux command is the shim (monkeypatch first:
    PATH is undone only after the clusters have closed, so their cancels reach the shim)."""
    from hpcgpu import FluxCluster

    monkeypatch.setenv("PATH", f"{SHIMS / 'flux'}{os.pathsep}{os.environ['PATH']}")
    return lambda **options: clusters(FluxCluster, **{**FAST, **options})


def _alive(job_id: str) -> bool:
    return slurm_alive(job_id.lstrip("f"))


def test_flux_two_node_jobs_scale_up_and_down(make):
    cluster = make(gpus_per_node=2, nodes=2)
    script = cluster.job_script()
    assert "#FLUX: --nodes=2\n#FLUX: --nslots=4\n" in script
    assert "\nflux run --nodes=2 --ntasks=2 " in script
    cluster.scale(jobs=2)
    cluster.wait_for_workers(gpus=8, timeout=120)
    with Client(cluster) as client:
        placement = gpu_placement(client)
        by_job: dict[str, set] = {}
        for name, p in placement.items():
            job, node, local = name.rsplit("-", 2)
            by_job.setdefault(job, set()).add((node, local, p["cuda_visible_devices"]))
        # flux run's task rank and HPCGPU_LOCAL_SIZE give each task its node: one worker per
        # GPU on each of a job's two nodes, each on its own GPU of its node
        assert sorted(by_job) == sorted(job.name for job in cluster.jobs)
        for workers in by_job.values():
            assert {(node, local) for node, local, _ in workers} == {
                ("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")}
            for node in ("0", "1"):
                assert len({gpu for n, _, gpu in workers if n == node}) == 2
        futures = client.map(lambda x: x * x, range(100))
        assert client.submit(sum, futures).result() == sum(x * x for x in range(100))
        del futures
        first = {job.name: job.job_id for job in cluster.jobs}
        assert all(job_id.startswith("f") for job_id in first.values())
        cluster.scale(jobs=1)
        wait_for(lambda: len(scheduler_workers(client)) == 4, 60, what="one job's workers")
        remaining = {name.rsplit("-", 2)[0] for name in gpu_placement(client)}
        gone = [job_id for name, job_id in first.items() if name not in remaining]
        assert len(remaining) == 1 and len(gone) == 1
        wait_for(lambda: not _alive(gone[0]), 60, what="the job to leave")


def test_flux_failing_job_reported_with_stderr(make):
    cluster = make(gpus_per_node=1, python="/nonexistent/bin/python3", max_failed_jobs=1)
    check_failing_job_reported(cluster, within=60)
    (job,) = cluster.jobs
    # the job script's python check ends it (exit 2), saying what to do; its stderr is read
    # from the --error file the #FLUX: directive names, with the id flux batch printed
    assert job.state == "failed" and job.exit_code == 2
    assert "/nonexistent/bin/python3 (not found) on " in job.stderr_tail
