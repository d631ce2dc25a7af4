"""A worker that cannot start is reported within 10 s with its own error (issue 15 item 2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from distributed import Client, Scheduler
from distributed.deploy.spec import SpecCluster

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
