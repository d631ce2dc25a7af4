"""Workers' local directories (spilled data, read back with pickle) never lie in a directory
of another user (#38's class: a shared directory). distributed takes
``<tmp>/dask-scratch-space`` (or ``-<uid>``) as it finds it, whoever made it: ``nobody``,
having made it first in a sticky ``/tmp``, owns the parent of every worker's directory."""

from __future__ import annotations

import multiprocessing.util
import os
import shutil
import stat
import tempfile
from pathlib import Path

import dask
import pytest

from attacker import NOBODY, can_act_as_nobody
from hpcgpu import LocalGPUCluster
from hpcgpu.system.safedir import exposure
from hpcgpu.worker.__main__ import _dask_worker_argv

pytestmark = pytest.mark.skipif(not can_act_as_nobody(), reason="needs root to act as nobody")


@pytest.fixture
def tmp(monkeypatch):
    """A sticky ``/tmp`` of our own where nobody made ``dask-scratch-space`` (and its
    ``-<uid>`` fallback) first, mode 0777; the temporary directory of this process."""
    multiprocessing.util.get_temp_dir()  # its per-process cache: never in the directory below
    base = Path(tempfile.mkdtemp(prefix="hpcgpu-scratch-test-"))
    os.chmod(base, 0o1777)
    for name in ("dask-scratch-space", f"dask-scratch-space-{os.getuid()}"):
        (base / name).mkdir()
        os.chown(base / name, NOBODY, NOBODY)
        os.chmod(base / name, 0o777)
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    with dask.config.set({"temporary-directory": None}):
        yield base
    shutil.rmtree(base, ignore_errors=True)


def local_directory(argv: list[str]) -> str | None:
    """The one --local-directory of a worker's argv (None: none)."""
    found = [argv[i + 1] for i, a in enumerate(argv) if a == "--local-directory"]
    assert len(found) <= 1, argv
    return found[0] if found else None


def test_a_local_clusters_workers_keep_nothing_in_another_users_directory(tmp):
    with LocalGPUCluster(n_workers=1, dashboard_address=None) as cluster:
        (where,) = [ws.local_directory for ws in cluster.scheduler.workers.values()]
    assert where.startswith(str(tmp)), where
    assert exposure(where) is None, exposure(where)  # before: nobody's dask-scratch-space


def test_the_worker_command_gets_a_private_local_directory(tmp):
    chosen = local_directory(_dask_worker_argv("tls://h:1", {}, "w", 1, ()))
    assert chosen == str(tmp / f".hpcgpu-{os.getuid()}") and exposure(chosen) is None
    assert stat.S_IMODE(os.stat(chosen).st_mode) == 0o700
    shutil.rmtree(chosen)
    (tmp / f".hpcgpu-{os.getuid()}").mkdir(mode=0o777)  # nobody took the name first
    os.chown(tmp / f".hpcgpu-{os.getuid()}", NOBODY, NOBODY)
    fallback = local_directory(_dask_worker_argv("tls://h:1", {}, "w", 1, ()))
    assert Path(fallback).parent == tmp and exposure(fallback) is None
    assert local_directory(_dask_worker_argv("tls://h:1", {}, "w", 1, ("--local-directory", "/x"))) == "/x"
    assert local_directory(_dask_worker_argv("tls://h:1", {"local_directory": "/y"}, "w", 1, ())) == "/y"
    with dask.config.set({"temporary-directory": "/z"}):  # the user's choice stands
        assert local_directory(_dask_worker_argv("tls://h:1", {}, "w", 1, ())) == "/z"
