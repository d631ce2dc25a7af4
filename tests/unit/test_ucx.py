"""UCX end to end on loopback, no GPU: a UCX scheduler, ``python -m hpcgpu.worker``
workers started with the command line and environment hpcgpu renders, and a client,
computing a result that moves data between the workers over ``ucx://``.

distributed-ucxx's libucx wheels run on a CPU machine, so CI exercises the UCX code path.
"""

from __future__ import annotations

import os
import subprocess
import sys

from contextlib import contextmanager

import cloudpickle
import dask.array as da
import pytest
from distributed import Client, Scheduler, SpecCluster

from hpcgpu.network import (
    NetworkSettings,
    client_address,
    config_context,
    job_environment,
    scheduler_options,
    worker_options,
)
from hpcgpu.jobspec.worker_command import WorkerCommand
from ucx_marks import needs_ucx

# Workers cannot import this test module: send its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = needs_ucx


def _start_workers(address: str, settings: NetworkSettings, n: int) -> list[subprocess.Popen]:
    """What a job script does: export job_environment, run WorkerCommand's argv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "DASK_DISTRIBUTED_UCXX"))}
    env.update(job_environment(settings, "worker", gpu=False))
    env["SLURM_JOB_ID"] = ""
    procs = []
    for i in range(n):
        # death_timeout bounds the nanny's start of its worker: with UCX a spawned interpreter
        # (its imports, preload, UCX connection). In a loaded CI run that took over 30 s
        # (imports 12 s, preload 4 s, registration 8 s): the nanny gave up, "0/2 workers".
        cmd = WorkerCommand(scheduler=address, name=f"ucx{i}", death_timeout=90, **worker_options(settings))
        procs.append(subprocess.Popen(cmd.argv(sys.executable), env=env))
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def _worker_ucx_view(dask_worker):
    import ucxx

    config = ucxx.get_config()
    return {
        "address": dask_worker.address,
        "tls": config["TLS"],
        "net_devices": config["NET_DEVICES"],
        "incoming": dask_worker.state.transfer_incoming_count_total,
    }


def _transpose_sum(client: Client) -> float:
    x = da.arange(400 * 400, chunks=100 * 400).reshape(400, 400).rechunk(100).astype("f8")
    return float(client.compute((x + x.T).sum()).result(timeout=60))


@contextmanager
def _cluster(settings: NetworkSettings, n_workers: int = 2, security=None):
    """Scheduler in this process (configured for its role, as cluster mode does), workers
    as subprocesses (as a job script starts them); yields a connected client. Never a
    ``Worker`` in this process: beside a UCX scheduler one crashed it (heap corruption,
    7 of 79 runs on 2 loaded cores with distributed-ucxx 0.52 alone; tests/unit/test_ucxauth.py)."""
    spec = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0", "security": security,
                                          **scheduler_options(settings)}}
    with config_context(settings, "scheduler"), SpecCluster(scheduler=spec, workers={}) as cluster:
        addresses = [listener.contact_address for listener in cluster.scheduler.listeners]
        worker_address = next(a for a in addresses if a.startswith(f"{settings.protocol}://"))
        procs = _start_workers(worker_address, settings, n_workers)
        try:
            with Client(client_address(addresses, settings), security=security) as client:
                client.wait_for_workers(n_workers, timeout=90)
                yield client, addresses
        finally:
            _stop(procs)


def test_hpcgpu_workers_compute_over_ucx_with_auto_transports():
    settings = NetworkSettings.create("ucx", interface="lo")
    with _cluster(settings) as (client, addresses):
        assert addresses[0].startswith("ucx://127.0.0.1:")
        assert _transpose_sum(client) == pytest.approx(2 * sum(range(400 * 400)))
        views = client.run(_worker_ucx_view)
        assert all(v["address"].startswith("ucx://127.0.0.1:") for v in views.values())
        # The sum of x + x.T needs the other worker's chunks: UCX carried them.
        assert sum(v["incoming"] for v in views.values()) > 0
        assert all(v["net_devices"] == "all" for v in views.values())


def test_tcp_over_ucx_and_a_tcp_listener_for_a_client_without_ucx():
    """Explicit transports reach UCX inside each worker; the client comes in over TCP
    (cluster mode with the scheduler in a job and a login node without UCX)."""
    settings = NetworkSettings.create("ucxx", transports="tcp", interface="lo", net_devices="lo",
                                      client_protocol="tcp")
    with _cluster(settings) as (client, addresses):
        assert [a.split("://")[0] for a in addresses] == ["ucxx", "tcp"]
        assert client.scheduler.address.startswith("tcp://")
        assert _transpose_sum(client) == pytest.approx(2 * sum(range(400 * 400)))
        views = client.run(_worker_ucx_view)
        assert all(v["address"].startswith("ucxx://127.0.0.1:") for v in views.values())
        # Workers without a GPU ask for TCP only (no cuda_copy), on the device we named.
        assert {(v["tls"], v["net_devices"]) for v in views.values()} == {("tcp", "lo")}


def test_tls_listener_for_the_client_beside_ucx_for_the_workers():
    """Scheduler in a job: workers speak UCX, the client on the login node comes in over TLS."""
    pytest.importorskip("cryptography")
    from distributed.security import Security

    settings = NetworkSettings.create("ucx", interface="lo", client_protocol="tls")
    with _cluster(settings, n_workers=1, security=Security.temporary()) as (client, addresses):
        assert [a.split("://")[0] for a in addresses] == ["ucx", "tls"]
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        (worker,) = client.scheduler_info()["workers"]
        assert worker.startswith("ucx://127.0.0.1:")
        assert client.submit(sum, [1, 2, 3], workers=[worker]).result(timeout=60) == 6
