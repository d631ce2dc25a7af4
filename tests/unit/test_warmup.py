"""The warm-up of schedulers and workers: the first graph's imports in a background thread."""

from __future__ import annotations

import subprocess
import sys

from hpcgpu.runner.scheduler import SchedulerOptions, scheduler_argv
from hpcgpu.system import warmup


def test_warm_up_imports_the_first_graphs_modules_in_a_thread_that_blocks_stop_signals():
    code = ("import sys, signal, threading; from hpcgpu.system import warmup, threadsignals;"
            "seen = [];"
            "orig = warmup._import_all;"
            "warmup._import_all = lambda m: (seen.append(threadsignals.blocked_here()), orig(m));"
            "assert 'hpcgpu.array.optimization' not in sys.modules;"
            "t = warmup.warm_up(); t.join(120);"
            "print(seen, t.daemon, all(m in sys.modules for m in warmup.MODULES), 'cupy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=150)
    assert done.stdout.split() == ["[True]", "True", "True", "False"], done.stderr[-2000:]


def test_a_failed_import_is_left_to_the_first_graph(caplog):
    with caplog.at_level("DEBUG", logger="distributed.hpcgpu"):
        warmup.warm_up(("hpcgpu.no_such_module",)).join(30)
    assert "importing hpcgpu.no_such_module failed" in caplog.text


def test_only_gpu_hosts_warm_up(monkeypatch):
    started = []
    monkeypatch.setattr(warmup, "warm_up", lambda: started.append(True))
    monkeypatch.setattr(warmup, "gpu_host", lambda: False)
    warmup.dask_setup(None)
    assert started == []
    monkeypatch.setattr(warmup, "gpu_host", lambda: True)
    warmup.dask_setup(None)
    assert started == [True]


def test_hpcgpu_runs_scheduler_preloads_the_warm_up():
    argv = scheduler_argv("python3", SchedulerOptions(dashboard_address=None), None)
    assert argv[argv.index("hpcgpu.system.warmup") - 1] == "--preload"
