"""A worker that cannot start is reported within 10 s with its own error (issue 15 item 2)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from distributed import Client, Scheduler
from distributed.deploy.spec import SpecCluster

from hpcgpu.worker.gpuworker import GPUWorker
from hpcgpu.worker.startfailure import WorkerStartError, wait_for_workers_or_exit

BAD_WORKER = '''from distributed import Worker
class Bad(Worker):
    def __init__(self, *args, **kwargs):
        raise MemoryError("std::bad_alloc: out_of_memory: RMM failure: Maximum pool size exceeded "
                          "(failed to allocate 16.000000 GiB)")
'''


def test_hpcgpu_worker_that_cannot_start_is_reported_at_once_with_its_error(tmp_path):
    (tmp_path / "badworker.py").write_text(BAD_WORKER)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    spec = {"cls": Scheduler, "options": {"dashboard": False, "port": 0}}
    log = tmp_path / "workers.log"
    with SpecCluster(scheduler=spec, workers={}) as cluster, Client(cluster) as client, \
            open(log, "w") as out:
        # the real entry point, two nannies as on a 2-GPU node, each worker failing in its constructor
        proc = subprocess.Popen([sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address,
                                 "--gpus-per-node", "2", "--name", "bad",
                                 "--worker-class", "badworker.Bad"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            began = time.monotonic()
            with pytest.raises(WorkerStartError) as error:
                wait_for_workers_or_exit(lambda: len(client.nthreads()), 2, proc.poll,
                                         log.read_text, timeout=120)
            # CI machine, 2 busy cores: the start of Python dominates; the wait itself adds 0.25 s
            assert time.monotonic() - began < 30
        finally:
            proc.kill()
            proc.wait(30)
    message = str(error.value)
    assert "after 0 of 2 connected" in message
    assert "MemoryError: std::bad_alloc" in message and "failed to allocate 16.000000 GiB" in message
    assert "PinnedNanny failed to start" in message or "Nanny failed to start" in message


#: what multiprocessing raises when it cannot create the worker process at all (a fork server
#: whose socket does not fit under TMPDIR, no memory to fork), injected at distributed's seam
NO_PROCESS = '''import distributed.process

async def _cannot_create(self):
    raise OSError("AF_UNIX path too long (injected: no worker process can be created)")

distributed.process.AsyncProcess.start = _cannot_create
'''


def test_a_worker_process_that_cannot_be_created_ends_the_command_at_once(tmp_path):
    """distributed's nanny joined a process that never started, stayed ``closing``, and the
    command waited for ever after logging the error (nanny-start-failed)."""
    (tmp_path / "sitecustomize.py").write_text(NO_PROCESS)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    spec = {"cls": Scheduler, "options": {"dashboard": False, "port": 0}}
    with SpecCluster(scheduler=spec, workers={}) as cluster:
        done = subprocess.run([sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address,
                               "--gpus-per-node", "2", "--name", "none"], env=env, capture_output=True,
                              text=True, timeout=60)
    assert done.returncode != 0
    assert "AF_UNIX path too long (injected" in done.stderr and "Nanny failed to start" in done.stderr


def test_local_gpu_cluster_whose_worker_process_cannot_be_created_raises(monkeypatch):
    import distributed.process

    from hpcgpu import LocalGPUCluster

    async def cannot_create(self):
        raise OSError("injected: no worker process can be created")

    monkeypatch.setattr(distributed.process.AsyncProcess, "start", cannot_create)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="Nanny failed to start"):
        LocalGPUCluster(gpus=[], n_workers=1, security=False, silence_logs=False)
    assert time.monotonic() - began < 30


class DiesOnceAfterConnecting(GPUWorker):
    """A worker that, where HPCGPU_TEST_DIE_TOKENS holds a file of its name, removes it and
    exits as soon as it connected: before its nanny read that it started."""

    async def start_unsafe(self):
        await super().start_unsafe()
        try:
            os.unlink(os.path.join(os.environ.get("HPCGPU_TEST_DIE_TOKENS", "/nonexistent"), str(self.name)))
        except OSError:
            return self
        asyncio.get_running_loop().call_soon(os._exit, 0)
        return self


def test_a_worker_that_dies_right_after_connecting_is_started_again_and_the_cluster_closes(tmp_path, monkeypatch):
    """The nanny restarts a worker that died while its start was still waiting to hear from
    it: distributed's first start then read the new start's message (and dropped it, another
    start's), both waited for ever, and so did the cluster's close (test_local_forkstart: 5
    hangs in 210 runs on a loaded machine). Each round here has an even chance to hang there."""
    import distributed.nanny

    from hpcgpu import LocalGPUCluster

    # a start looks for its worker's message each second, not each 50 ms: the death and the
    # next start always fall between two looks, as on a loaded machine now and then
    monkeypatch.setattr(distributed.nanny.WorkerProcess, "_init_msg_interval", 1.0)
    monkeypatch.setenv("HPCGPU_TEST_DIE_TOKENS", str(tmp_path))
    cluster = LocalGPUCluster(gpus=["0", "1"], n_workers=2, worker_class=DiesOnceAfterConnecting,
                              dashboard_address=None)
    try:
        with Client(cluster) as client:
            for _ in range(3):
                for name in cluster.workers:
                    (tmp_path / str(name)).write_text("")
                for pid in client.run(os.getpid).values():
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 20
                while (states := {name: n.process and n.process.status.name
                                  for name, n in cluster.workers.items()}) != {0: "running", 1: "running"} \
                        or list(tmp_path.iterdir()):
                    assert time.monotonic() < deadline, states
                    time.sleep(0.05)
    finally:
        cluster.close(timeout=20)


def test_a_start_that_waited_for_another_does_not_begin_once_its_nanny_closed():
    from distributed import Nanny

    from hpcgpu.worker.forkstart import fork_started

    async def main():
        async with Scheduler(dashboard=False, port=0) as scheduler:
            nanny = await fork_started(Nanny)(scheduler.address, nthreads=1, dashboard=False)
            async with nanny._hpcgpu_start_lock:  # a start under way
                waiting = asyncio.create_task(nanny.instantiate())  # the restart after a death
                await asyncio.sleep(0)
                await nanny.close()
            assert (await waiting).name == "closed"
            assert nanny.process is None  # no worker process for a closed nanny

    asyncio.run(main())


SLOW_PRELOAD = '''import os
import time


def dask_setup(worker):
    open(os.environ["HPCGPU_TEST_STARTED"], "w").close()
    time.sleep(30)  # still starting when its scheduler goes and the command is told to stop
'''


def test_hpcgpu_worker_stopped_while_its_worker_starts_ends_at_once_and_cleanly(tmp_path):
    """SIGTERM while a worker starts and its scheduler is gone (rank 0 of an MPI job killed
    by MPI_Abort): distributed's nanny waited for that start, the worker's death timeout
    (60 s), then ended in an AssertionError traceback."""
    (tmp_path / "slowpreload.py").write_text(SLOW_PRELOAD)
    started = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               HPCGPU_TEST_STARTED=str(started))
    spec = {"cls": Scheduler, "options": {"dashboard": False, "port": 0}}
    log = tmp_path / "worker.log"
    with SpecCluster(scheduler=spec, workers={}) as cluster, open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address,
                                 "--death-timeout", "60", "--preload", "slowpreload"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not started.exists():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
        except BaseException:
            proc.kill()
            raise
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - began < 10, log.read_text()[-3000:]
    assert code == 0 and "Traceback" not in log.read_text(), log.read_text()[-3000:]
