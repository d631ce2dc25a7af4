"""An idle UCX worker sleeps: it does not hold a CPU core while it waits for messages.

distributed-ucxx's default progress mode ("blocking") waits on every UCX request with
``while not done: await asyncio.sleep(0)`` (ucxx ``UCXRequest.wait_yield``), and distributed
keeps a receive pending on each comm: each UCX process spins at 100 % of a core while idle.
Two clusters on one 2-core host then starve each other (and everything else) of CPU.

The measure is the time the process's threads were runnable (running or waiting for a CPU,
``/proc/<pid>/task/*/schedstat``) over a wall-clock window: a spinning thread is runnable the
whole window whatever the load, a sleeping one only when it has work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from distributed import Client, Scheduler, SpecCluster

from hpcgpu.jobspec.worker_command import WorkerCommand
from hpcgpu.network import (
    NetworkSettings,
    config_context,
    job_environment,
    scheduler_options,
    ucx_unavailable_reason,
    worker_options,
)

REASON = ucx_unavailable_reason()
pytestmark = pytest.mark.skipif(
    REASON is not None, reason=f"UCX tests need distributed-ucxx (pip install 'hpcgpu[ucx]'): {REASON}"
)


def runnable_seconds(pid: int) -> float:
    """Seconds the threads of ``pid`` have been running or waiting for a CPU."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                running, waiting, _ = f.read().split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        total += int(running) + int(waiting)
    return total / 1e9


def runnable_shares(pids: list[int], window: float) -> dict[int, float]:
    """``{pid: runnable seconds / wall seconds}`` over ``window`` seconds (1.0: a spinning thread)."""
    before, start = {pid: runnable_seconds(pid) for pid in pids}, time.monotonic()
    time.sleep(window)  # the measurement window itself, not a wait for a condition
    wall = time.monotonic() - start
    return {pid: (runnable_seconds(pid) - before[pid]) / wall for pid in pids}


def test_idle_ucx_worker_and_nanny_do_not_spin():
    settings = NetworkSettings.create("ucx", transports="tcp", interface="lo", net_devices="lo")
    spec = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0", **scheduler_options(settings)}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "UCXPY_", "DASK_DISTRIBUTED_UCXX"))}
    env.update(job_environment(settings, "worker", gpu=False))
    env["SLURM_JOB_ID"] = ""
    with config_context(settings, "scheduler"), SpecCluster(scheduler=spec, workers={}) as cluster:
        cmd = WorkerCommand(scheduler=cluster.scheduler_address, name="idle", death_timeout=30,
                            **worker_options(settings))
        proc = subprocess.Popen(cmd.argv(sys.executable), env=env)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(1, timeout=90)
                assert client.submit(sum, [1, 2]).result(timeout=30) == 3  # comms open both ways
                nanny = psutil.Process(proc.pid)
                names = {p.pid: " ".join(p.cmdline()[1:3]) for p in [nanny, *nanny.children(recursive=True)]}
                shares = runnable_shares(list(names), window=1.5)
        finally:
            proc.terminate()
            proc.wait(30)
    spinning = {f"{pid} ({names[pid]})": round(share, 2) for pid, share in shares.items() if share > 0.5}
    assert not spinning, f"idle UCX processes runnable most of the time (busy-polling): {spinning}"


def test_idle_local_gpu_cluster_ucx_worker_does_not_spin():
    """``LocalGPUCluster(protocol="ucx")``: its worker processes wait asleep too (the nannies
    and the scheduler live in this process, which keeps distributed-ucxx's default)."""
    from hpcgpu.cluster.local import LocalGPUCluster

    with LocalGPUCluster(n_workers=1, gpus=[], protocol="ucx", interface="lo",
                         dashboard_address=None) as cluster, Client(cluster) as client:
        assert cluster.scheduler_address.startswith("ucx://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3
        (pid,) = client.run(os.getpid).values()
        (share,) = runnable_shares([pid], window=1.5).values()
    assert share < 0.5, f"the idle UCX worker process was runnable {share:.0%} of the time (busy-polling)"
