"""Drain signals and the fork server forked from the launcher (hpcgpu.worker.forkedserver):
a loopback scheduler, the real entry point; seconds, not a unit test's fraction of one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from distributed import Client, LocalCluster


@contextmanager
def forked_workers(tmp_path, name: str, launcher: tuple[str, ...] = ("-m", "hpcgpu.worker")):
    """(client, launcher process, its log): ``python -m hpcgpu.worker`` (or ``python
    *launcher``) for two GPUs on a loopback scheduler, both workers connected."""
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, \
            Client(cluster) as client, open(tmp_path / "log", "w+") as log:
        proc = subprocess.Popen(
            [sys.executable, *launcher, cluster.scheduler_address, "--name", name,
             "--gpus-per-node", "2", "--death-timeout", "30"],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", SLURM_JOB_ID=""), stderr=log)
        try:
            client.wait_for_workers(2, timeout=60)
            yield client, proc, log
        finally:
            proc.kill()


def test_a_drain_signal_to_the_launcher_retires_its_forked_workers(tmp_path):
    """SIGUSR1 (SLURM's --signal before the walltime) reaches the workers forked from the
    server, not the server: each retires gracefully and the launcher ends cleanly."""
    with forked_workers(tmp_path, "dr") as (_, proc, log):
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(30) == 0
        log.seek(0)
        assert log.read().count("drain signal: retiring worker") == 2


def test_a_worker_stopped_by_sigterm_is_not_restarted_its_nanny_closes(tmp_path):
    """scancel signals every process of a job: a worker that dies of SIGTERM before its nanny
    acts is not restarted (a restart under the nanny's close ended in tracebacks); the
    nanny closes, the other GPU's worker stays, and SIGTERM to the launcher ends it cleanly.
    The launcher's resource tracker is a fork of it, not a fresh interpreter, and still
    unlinks the semaphore that the worker dead of the signal left."""
    def leak_a_semaphore(dask_worker) -> str:  # a lock that this worker holds until its end
        import multiprocessing

        dask_worker.test_lock = multiprocessing.get_context("forkserver").Lock()
        return dask_worker.test_lock._semlock.name.lstrip("/")

    with forked_workers(tmp_path, "st") as (client, proc, log):
        tree = [" ".join(p.cmdline()) for p in psutil.Process(proc.pid).children(recursive=True)]
        assert not [line for line in tree if "resource_tracker" in line], tree
        pids = client.run(os.getpid)
        address, first = min(client.scheduler_info()["workers"].items(), key=lambda w: w[1]["name"])
        semaphore = Path("/dev/shm") / f"sem.{client.run(leak_a_semaphore, workers=[address])[address]}"
        assert semaphore.exists()
        os.kill(pids[address], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while len(client.scheduler_info()["workers"]) != 1:
            assert time.monotonic() < deadline, client.scheduler_info()["workers"]
            time.sleep(0.05)
        time.sleep(1)  # a restart, if any, would have registered by now
        assert [w["name"] for w in client.scheduler_info()["workers"].values()] != [first["name"]]
        assert len(client.scheduler_info()["workers"]) == 1
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.seek(0)
        text = log.read()
    # that worker's nanny only: once running, or still starting (its worker registered, the
    # nanny not yet told: the race CI met under scancel)
    assert text.count("Reason: hpcgpu-worker-sigterm") + text.count("Reason: nanny-start-failed") == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    deadline = time.monotonic() + 10  # the tracker acts once the launcher's processes are gone
    while semaphore.exists():
        assert time.monotonic() < deadline, f"{semaphore} left behind"
        time.sleep(0.05)


LAUNCHER_WATCHED = r'''
import gc, os, sys
log = open(sys.argv[1], "a", buffering=1)
def record_imports(event, args):
    if event == "import":
        log.write(f"{os.getpid()} import {args[0]}\n")
sys.addaudithook(record_imports)
os.register_at_fork(after_in_child=lambda: log.write(f"{os.getpid()} forked frozen {gc.get_freeze_count()}\n"))
sys.argv = ["hpcgpu.worker", *sys.argv[2:]]
from hpcgpu.worker.__main__ import main
main()
'''


def test_forked_workers_find_done_what_each_would_do_after_the_fork(tmp_path):
    """The fork server imports what every worker imports after the fork (its HTTP routes
    with prometheus_client, numpy.random) and freezes its objects before it forks, so a
    worker neither imports them nor walks them in its first full collection
    (hpcgpu.worker._forkready): about half of a forked worker's start-up CPU."""
    trace = tmp_path / "trace"
    with forked_workers(tmp_path, "fr", ("-c", LAUNCHER_WATCHED, str(trace))) as (client, _, _):
        workers = set(client.run(os.getpid).values())
    lines = [line.split(" ", 2) for line in trace.read_text().splitlines()]
    frozen = {int(pid): int(rest.split()[-1]) for pid, what, rest in lines if what == "forked"}
    after_fork = {int(pid): set() for pid in workers}
    for pid, what, rest in lines:
        if what == "import" and int(pid) in after_fork:
            after_fork[int(pid)].add(rest)
    assert all(frozen[pid] > 10_000 for pid in workers), frozen
    for pid, modules in after_fork.items():
        assert not modules & {"prometheus_client", "numpy.random", "distributed.http.worker.prometheus",
                              "distributed.http.health", "tornado.platform.asyncio"}, sorted(modules)
        assert len(modules) < 10, sorted(modules)
