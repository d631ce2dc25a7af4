"""Cluster mode's default log directory: out of the working directory, old job logs pruned."""

from __future__ import annotations

import os
import time

import pytest

from hpcgpu.cluster.batch.setup import prepare
from hpcgpu.system.logdir import prune_job_logs


def test_only_old_job_logs_are_pruned(tmp_path):
    now = time.time()
    names = ["hpcgpu-1.out", "hpcgpu-1.err", "hpcgpu.o7", "key.pem", "c-scheduler.json", "new.err"]
    for name in names:
        (tmp_path / name).write_text("x")
        if name != "new.err":
            os.utime(tmp_path / name, (now - 8 * 86400, now - 8 * 86400))
    removed = prune_job_logs(tmp_path, 7 * 86400, now=now)
    assert sorted(p.name for p in removed) == ["hpcgpu-1.err", "hpcgpu-1.out", "hpcgpu.o7"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c-scheduler.json", "key.pem", "new.err"]


def test_pbs_job_logs_are_pruned_too(tmp_path):
    """OpenPBS writes ``-o dir/`` as ``<job id>.OU`` (``.ER`` for dask-jobqueue's CPU jobs)."""
    now = time.time()
    for name in ("37.vm-pbs.OU", "8.vm-pbs.ER", "12[3].vm-pbs.OU"):
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (now - 8 * 86400, now - 8 * 86400))
    assert len(prune_job_logs(tmp_path, 7 * 86400, now=now)) == 3
    assert list(tmp_path.iterdir()) == []


def test_the_default_is_the_user_cache_not_the_working_directory(tmp_path, monkeypatch):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    logs = cache / "hpcgpu" / "logs"
    logs.mkdir(parents=True)
    old, fresh = logs / "hpcgpu-1.err", logs / "hpcgpu-2.err"
    old.write_text("x")
    fresh.write_text("x")
    os.utime(old, (time.time() - 30 * 86400,) * 2)
    setup = prepare("slurm", {"gpus_per_node": 1})
    assert setup.log_directory == str(logs) and setup.shared_temp_directory == str(logs)
    assert list(work.iterdir()) == []  # nothing in the working directory
    assert not old.exists() and fresh.exists()


def test_a_chosen_directory_is_never_pruned(tmp_path):
    old = tmp_path / "hpcgpu-1.err"
    old.write_text("x")
    os.utime(old, (time.time() - 30 * 86400,) * 2)
    assert prepare("slurm", {"gpus_per_node": 1, "log_directory": str(tmp_path)}).log_directory == str(tmp_path)
    assert old.exists()


@pytest.mark.parametrize("retention", ["7 days", "12h", "30s"])
def test_retention_forms(retention, tmp_path, monkeypatch):
    import dask

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with dask.config.set({"hpcgpu.log-retention": retention}):
        prepare("slurm", {"gpus_per_node": 1})
