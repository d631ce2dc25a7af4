"""The warm-up of schedulers and workers: the first graph's imports, done by the server's
preload before it takes a message (a thread beside the server raced the first graph)."""

from __future__ import annotations

import subprocess
import sys

from hpcgpu.runner.scheduler import SchedulerOptions, scheduler_argv
from hpcgpu.system import warmup

def test_the_preload_imports_before_the_server_takes_a_message(monkeypatch):
    # a thread beside the server raced the first graph's own imports of dask.array: on two
    # H200 a worker died at its first graph ("cannot import name 'arange' from partially
    # initialized module 'dask.array.creation'", benchmarks/results/history.md)
    code = ("import sys, threading; from hpcgpu.system import warmup; warmup.gpu_host = lambda: True;"
            "before = threading.active_count(); warmup.dask_setup(None);"
            "print(all(m in sys.modules for m in warmup.MODULES), threading.active_count() == before)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=150)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]


def test_a_failed_import_is_left_to_the_first_graph(caplog):
    with caplog.at_level("DEBUG", logger="distributed.hpcgpu"):
        warmup.import_all(("hpcgpu.no_such_module",))
    assert "importing hpcgpu.no_such_module failed" in caplog.text


def test_only_gpu_hosts_warm_up(monkeypatch):
    imported = []
    monkeypatch.setattr(warmup, "import_all", lambda modules: imported.append(modules))
    monkeypatch.setattr(warmup, "gpu_host", lambda: False)
    warmup.dask_setup(None)
    assert imported == []
    monkeypatch.setattr(warmup, "gpu_host", lambda: True)
    warmup.dask_setup(None)
    assert imported == [warmup.MODULES]


def test_hpcgpu_runs_scheduler_preloads_the_warm_up():
    argv = scheduler_argv("python3", SchedulerOptions(dashboard_address=None), None)
    assert argv[argv.index("hpcgpu.system.warmup") - 1] == "--preload"


def test_a_scheduler_with_the_preload_freezes_its_start_up_objects(tmp_path):
    # hpcgpu run's and scheduler_in_job's schedulers run the optimiser on every graph: their
    # full collections walk only what came after start-up, as hpcgpu's workers' do
    from distributed import Client

    from conftest import wait_for

    file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0",
                                  "--host", "127.0.0.1", "--no-dashboard", "--scheduler-file", str(file),
                                  "--preload", "hpcgpu.system.warmup"], stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: file.exists() and file.stat().st_size, 60, what="the scheduler file")
        with Client(scheduler_file=str(file), timeout=30) as client:
            frozen = client.run_on_scheduler(lambda: __import__("gc").get_freeze_count())
        assert frozen > 10_000
    finally:
        scheduler.terminate()
        scheduler.wait(30)


def test_a_worker_is_not_frozen_by_the_preload(monkeypatch):
    import gc

    monkeypatch.setattr(warmup, "gpu_host", lambda: False)
    before = gc.get_freeze_count()
    warmup.dask_setup(object())  # a worker's preload: GPUWorker freezes itself once started
    assert gc.get_freeze_count() == before
