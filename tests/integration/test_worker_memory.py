"""Too little memory is refused before anything starts, and a worker that its nanny restarts
again and again (of any cause) is a start failure, reported at once in the worker's words."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, strategies as st

from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import GPUJobShape, SLURMCluster
from hpcgpu.jobspec.resources import MIN_WORKER_MEMORY


@pytest.mark.parametrize("options", [dict(memory_per_gpu="60"), dict(memory_per_gpu=60),
                                     dict(memory_per_gpu="512MiB"),
                                     dict(gpus_per_node=4, memory_per_node="2GiB")])
def test_memory_a_worker_cannot_live_in_is_refused_with_the_minimum(options):
    name = next(k for k in options if k.startswith("memory"))
    with pytest.raises(ValueError, match=rf"{name}=.* less than the 1 GiB a worker needs"):
        GPUJobShape.create(**options)


@given(st.integers(min_value=1, max_value=2**34), st.integers(min_value=1, max_value=8))
def test_the_minimum_is_per_gpu_worker_however_it_is_given(size, gpus):
    try:
        GPUJobShape.create(gpus_per_node=gpus, memory_per_node=size)
        assert size // gpus >= MIN_WORKER_MEMORY
    except ValueError as error:
        assert size // gpus < MIN_WORKER_MEMORY and "memory_per_node" in str(error)


@pytest.mark.slurm
def test_a_restart_storm_fails_the_job_at_once_with_the_nannys_reason(slurm, clusters):
    # the nanny kills its worker as soon as it holds 0.001 % of its memory: the storm that
    # memory_per_gpu="60" made, from a cause no argument check catches
    storm = ["export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=0.00001"]
    cluster = clusters(SLURMCluster, gpus_per_node=1, job_script_prologue=storm,
                       max_failed_jobs=1, **FAST)
    cluster.scale(jobs=1)
    started = time.monotonic()
    try:  # a worker may connect for a moment between two kills
        cluster.wait_for_workers(gpus=1, timeout=300)
    except RuntimeError as error:
        message = str(error)
    else:
        message = wait_for(lambda: "\n".join(cluster.failures), 120, what="the failure report")
    assert "WorkerRestartStormError" in message and "memory budget" in message, message
    assert time.monotonic() - started < 120, message  # not the 300 s timeout
    wait_for(lambda: [job.state for job in cluster.jobs] == ["failed"], 30, what="the failed job")


@pytest.mark.slurm
def test_waiting_keeps_the_worker_status_streams_view_of_a_worker_that_left(slurm, clusters):
    """The race of the restart storm above, made deterministic: the stream added a worker,
    the scheduler's snapshot (read while waiting) no longer has it, the stream's "remove"
    comes after. The remove must find the worker it names."""
    cluster = clusters(SLURMCluster, gpus_per_node=1, **FAST)
    address = "tls://127.0.0.1:1"
    info = dict(name="SLURMCluster-0-0-0", status="running", nthreads=1, memory_limit=0)

    async def stream(op, msg):  # as the stream's events arrive: in the cluster's event loop
        cluster._update_worker_status(op, msg)

    cluster.sync(stream, "add", {"workers": {address: info}})

    async def gone():
        return {"workers": {}}

    cluster.scheduler_comm.identity = gone
    with pytest.raises(TimeoutError):
        cluster.wait_for_workers(gpus=1, timeout=0.5)
    assert address in cluster.scheduler_info["workers"]
    cluster.sync(stream, "remove", address)
    assert address not in cluster.scheduler_info["workers"]
