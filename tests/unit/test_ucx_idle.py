"""An idle UCX worker sleeps: it does not hold a CPU core while it waits for messages.

distributed-ucxx's default progress mode ("blocking") waits on every UCX request with
``while not done: await asyncio.sleep(0)`` (ucxx ``UCXRequest.wait_yield``), and distributed
keeps a receive pending on each comm: each UCX process spins at 100 % of a core while idle.
Two clusters on one 2-core host then starve each other (and everything else) of CPU.

The measure is how often the process's event loop turns (asks its selector for events) in a
window: a loop that polls turns as fast as it gets the CPU (tens of thousands of times a second
here, even with the 2 cores loaded 15 times over); one that sleeps turns for its timers and
messages (a few hundred times a second, whatever the load).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import cloudpickle
from distributed import Client, Scheduler, SpecCluster

from hpcgpu.jobspec.worker_command import WorkerCommand
from hpcgpu.network import (
    NetworkSettings,
    config_context,
    job_environment,
    scheduler_options,
    worker_options,
)
from ucx_marks import needs_ucx

# Workers started by the command line cannot import this test module: send its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = needs_ucx


#: Loop turns a second above which a loop polls: an idle worker that sleeps turns ~400 times.
POLLING_TURNS = 2000


async def loop_turns(window: float = 1.0) -> float:
    """Turns a second of this process's event loop over ``window`` seconds."""
    selector = asyncio.get_running_loop()._selector
    original, turns = selector.select, []

    def select(timeout=None):
        turns.append(timeout)
        return original(timeout)

    selector.select = select
    try:
        await asyncio.sleep(window)  # the observation window, not a wait for a condition
    finally:
        del selector.select  # back to the class's method
    return len(turns) / window


def polling(views: dict) -> dict:
    """``{address: turns a second}`` of the processes whose loop polls."""
    return {where: round(turns) for where, turns in views.items() if turns > POLLING_TURNS}


def test_idle_ucx_worker_and_nanny_do_not_spin():
    # No net_devices: the scheduler runs in this pytest process, whose UCX keeps the configuration
    # of its first connection, and with UCX_NET_DEVICES=lo a process's own scheduler and
    # worker never reach each other (test_ucxauth's in-process test then hung).
    settings = NetworkSettings.create("ucx", transports="tcp", interface="lo")
    spec = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0", **scheduler_options(settings)}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "UCXPY_", "DASK_DISTRIBUTED_UCXX"))}
    env.update(job_environment(settings, "worker", gpu=False))
    env["SLURM_JOB_ID"] = ""
    with config_context(settings, "scheduler"), SpecCluster(scheduler=spec, workers={}) as cluster:
        # as long as the wait below: a spawned UCX worker's start took over 30 s in loaded CI
        cmd = WorkerCommand(scheduler=cluster.scheduler_address, name="idle", death_timeout=90,
                            **worker_options(settings))
        proc = subprocess.Popen(cmd.argv(sys.executable), env=env)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(1, timeout=90)
                assert client.submit(sum, [1, 2]).result(timeout=30) == 3  # comms open both ways
                workers = client.run(loop_turns)
                nannies = client.run(loop_turns, nanny=True)
        finally:
            proc.terminate()
            proc.wait(30)
    assert not polling(workers), f"idle UCX worker polls (loop turns a second): {polling(workers)}"
    assert not polling(nannies), f"idle UCX nanny polls (loop turns a second): {polling(nannies)}"


def test_idle_local_gpu_cluster_ucx_worker_does_not_spin():
    """``LocalGPUCluster(protocol="ucx")``: its worker processes wait asleep too (the nannies
    and the scheduler live in this process, which keeps distributed-ucxx's default)."""
    from hpcgpu.cluster.local import LocalGPUCluster

    with LocalGPUCluster(n_workers=1, gpus=[], protocol="ucx", interface="lo",
                         dashboard_address=None) as cluster, Client(cluster) as client:
        assert cluster.scheduler_address.startswith("ucx://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3
        workers = client.run(loop_turns)
    assert not polling(workers), f"idle UCX worker process polls (loop turns a second): {polling(workers)}"
