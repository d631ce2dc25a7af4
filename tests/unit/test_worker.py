"""The worker entry point against a real local scheduler (no batch system, no GPU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from distributed import Client, LocalCluster

from conftest import wait_for
from hpcgpu.worker.placement import placement_from_env
from hpcgpu.system.workers import scheduler_workers


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"SLURM_JOB_ID": "9", "SLURM_NODEID": "0", "SLURM_LOCALID": "3", "CUDA_VISIBLE_DEVICES": "3"},
         ("9-0-3", "3")),
        ({"PMI_RANK": "6", "PMI_LOCAL_RANK": "2", "PMI_LOCAL_SIZE": "4"}, ("p-1-2", "2")),
        ({"PALS_RANKID": "3", "PALS_LOCAL_RANKID": "3", "PALS_LOCAL_SIZE": "4",
          "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c,GPU-d"}, ("p-0-3", "GPU-d")),
        ({"JSM_NAMESPACE_RANK": "4", "JSM_NAMESPACE_LOCAL_RANK": "0", "JSM_NAMESPACE_LOCAL_SIZE": "4",
          "CUDA_VISIBLE_DEVICES": "0"}, ("p-1-0", "0")),
    ],
)
def test_placement_from_each_launcher(env, expected):
    place = placement_from_env(None if "SLURM_JOB_ID" in env else "p", env)
    assert (place.name, place.gpu) == expected


def _by_name(client):
    return client.run_on_scheduler(
        lambda dask_scheduler: {ws.name: (ws.address, ws.resources, ws.extra["hpcgpu"]["cuda_visible_devices"])
                                for ws in dask_scheduler.workers.values()})


def test_one_process_per_node_starts_a_pinned_nanny_per_gpu_and_restarts_dead_workers():
    """--gpus-per-node: one process, one nanny per GPU, each worker on its own GPU; a worker
    that dies is restarted by its nanny on the same GPU, under the same name."""
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, Client(cluster) as client:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="2,3", SLURM_JOB_ID="")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "job7",
             "--launcher", "direct", "--gpus-per-node", "2", "--death-timeout", "30"], env=env,
        )
        try:
            client.wait_for_workers(2, timeout=60)
            workers = _by_name(client)
            assert {n: w[1:] for n, w in workers.items()} == {
                "job7-0-0": ({"GPU": 1.0}, "2"), "job7-0-1": ({"GPU": 1.0}, "3")}
            seen = client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"])
            assert sorted(seen.values()) == ["2", "3"]
            nannies = client.run(os.getpid, nanny=True)
            assert set(nannies.values()) == {proc.pid}  # both nannies live in the one process
            method = client.run(lambda: __import__("dask").config.get(
                "distributed.worker.multiprocessing-method"), nanny=True)
            assert set(method.values()) == {"forkserver"}
            assert client.submit(sum, [1, 2, 3], resources={"GPU": 1}).result() == 6
            dead = workers["job7-0-1"][0]
            old_pid = client.run(os.getpid, workers=[dead])[dead]
            os.kill(old_pid, signal.SIGKILL)
            wait_for(lambda: dead not in scheduler_workers(client)
                     and len(scheduler_workers(client)) == 2, 60,
                     what="the nanny to restart the dead worker")
            again = _by_name(client)
            assert {n: w[2] for n, w in again.items()} == {"job7-0-0": "2", "job7-0-1": "3"}
            assert client.run(os.getpid, workers=[again["job7-0-1"][0]]) != {dead: old_pid}
        finally:
            proc.terminate()
            proc.wait(30)
        wait_for(lambda: not scheduler_workers(client), 30, what="workers to leave")


def test_one_process_per_node_refuses_fewer_visible_gpus_and_spawns_without_nanny():
    bad = subprocess.run([sys.executable, "-m", "hpcgpu.worker", "tcp://127.0.0.1:1", "--gpus-per-node", "2"],
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES="5"), capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "gpus_per_node=2 but CUDA_VISIBLE_DEVICES='5' lists 1 GPU(s)" in bad.stderr
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, Client(cluster) as client:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "nn",
             "--gpus-per-node", "2", "--death-timeout", "30", "--no-nanny"],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", SLURM_JOB_ID=""))
        try:
            client.wait_for_workers(2, timeout=60)
            assert {n: w[2] for n, w in _by_name(client).items()} == {"nn-0-0": "0", "nn-0-1": "1"}
        finally:
            proc.terminate()
            proc.wait(30)


def test_worker_gpu_options_are_validated_and_recorded():
    bad = subprocess.run([sys.executable, "-m", "hpcgpu.worker", "tcp://127.0.0.1:1", "--rmm-pool-size", "huge"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "rmm_pool_size='huge' is not a size" in bad.stderr
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, Client(cluster) as client:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "w",
             "--rmm-pool-size", "0.5", "--device-memory-limit", "none", "--no-cpu-affinity",
             "--death-timeout", "30"], env=dict(os.environ, CUDA_VISIBLE_DEVICES="", SLURM_JOB_ID=""))
        try:
            client.wait_for_workers(1, timeout=60)
            env = client.run(lambda: {k: v for k, v in os.environ.items() if k.startswith("HPCGPU_")})
            (worker_env,) = env.values()
            from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
            options = GPUWorkerOptions.from_env(worker_env)
            assert (options.rmm_pool_size, options.device_memory_limit, options.cpu_affinity) == ("0.5", None, False)
            kind = client.run(lambda dask_worker: (type(dask_worker).__name__, dask_worker.hpcgpu_setup))
            assert list(kind.values()) == [("GPUWorker", {"allocator": None, "device_memory_limit": None,
                                                          "cpu_affinity": None})]
        finally:
            proc.terminate()
            proc.wait(30)


def test_a_worker_closing_during_a_heartbeat_logs_no_traceback(caplog):
    """distributed's Worker.close closes its connections under a heartbeat in flight; the
    heartbeat then logs a traceback (seen in CI at the end of a batch job that passed).
    The preload's HeartbeatGate makes the close wait for that heartbeat."""
    import asyncio
    import logging

    from distributed import Scheduler, Worker

    async def close_during_a_heartbeat():
        async with Scheduler(dashboard_address=":0", port=0) as scheduler:
            answered = scheduler.handlers["heartbeat_worker"]
            in_flight = asyncio.Event()

            async def slow_heartbeat(*args, **kwargs):  # a scheduler slow to answer
                in_flight.set()
                await asyncio.sleep(1.0)
                return answered(*args, **kwargs)

            scheduler.handlers["heartbeat_worker"] = slow_heartbeat
            worker = await Worker(scheduler.address, preload=["hpcgpu.worker.preload"], nthreads=1)
            await asyncio.wait_for(in_flight.wait(), 10)
            await worker.close()
            return worker.status.name

    with caplog.at_level(logging.INFO, logger="distributed"):
        status = asyncio.run(close_during_a_heartbeat())
    assert status == "closed"
    assert "during heartbeat" not in caplog.text and "Traceback" not in caplog.text, caplog.text


def test_an_in_process_gpu_worker_freezes_start_up_objects_and_hands_the_collector_back(monkeypatch):
    """As in hpcgpu.mpi.initialize(exit=False): the worker runs inside a user's script,
    which goes on after it; what the worker froze must be collectable again."""
    import asyncio
    import gc

    from distributed import Scheduler

    from hpcgpu.worker.gpuworker import GPUWorker

    from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions

    for name, value in GPUWorkerOptions(cpu_affinity=False).to_env().items():
        monkeypatch.setenv(name, value)  # this test process keeps its cores

    async def run_a_worker():
        async with Scheduler(dashboard_address=":0", port=0) as scheduler:
            async with GPUWorker(scheduler.address, nthreads=1) as worker:
                return gc.get_freeze_count(), worker

    during, worker = asyncio.run(run_a_worker())
    assert worker.status.name == "closed"
    assert during > 10_000 and gc.get_freeze_count() == 0
