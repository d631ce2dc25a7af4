"""``hpcgpu run`` outside a batch system (direct launcher, fake GPU ids), real Dask."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

from click.testing import CliRunner

from batchtools import CHECK, processes_with
from conftest import wait_for
from hpcgpu.cli import main


def run_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "hpcgpu", "run", "--dashboard-address", ":0", "--grace", "5", *args]


def test_direct_run_checks_workers_and_propagates_the_exit_code(tmp_path):
    """Also ``--interface NAME`` (docs/batch.md, docs/sites.md) with TLS, the default:
    distributed's ``dask scheduler`` refuses ``--interface`` beside its TLS files ('Can not
    specify both interface and host'), so every such run ended before the scheduler listened.
    (One run for both: each ``hpcgpu run`` starts a scheduler, workers and the script.)"""
    marker = f"HPCGPU_TEST_MARKER={uuid.uuid4().hex}"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", HPCGPU_TEST_MARKER=marker.split("=")[1])
    done = subprocess.run(
        run_argv("--work-dir", str(tmp_path / "work"), "--interface", "lo", str(CHECK), "--expect", "2",
                 "--json", str(tmp_path / "r.json"), "--exit-code", "3"),
        env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    assert result["scheduler"].startswith("tls://127.0.0.1:"), result["scheduler"]
    assert sorted(w["cuda_visible_devices"] for w in result["workers"].values()) == ["0", "1"]
    assert not (tmp_path / "work").exists()  # certificates, scheduler file and the folder removed
    assert processes_with(marker) == []


def test_sigterm_stops_script_workers_and_scheduler(tmp_path):
    marker = f"HPCGPU_TEST_MARKER={uuid.uuid4().hex}"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", HPCGPU_TEST_MARKER=marker.split("=")[1])
    proc = subprocess.Popen(
        run_argv("--work-dir", str(tmp_path / "work"), str(CHECK), "--marker",
                 str(tmp_path / "started"), "--sleep", "300"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )
    wait_for(lambda: (tmp_path / "started").exists() or proc.poll() is not None, 120, what="script")
    assert len(processes_with(marker)) >= 4  # hpcgpu run, scheduler, worker (+nanny), script
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped by SIGTERM" in output
    assert processes_with(marker) == []
    assert not (tmp_path / "work").exists()


def test_the_default_work_dir_is_not_left_behind_and_a_users_one_stays(tmp_path):
    # The default: the per-user private directory of cluster mode, not ./.hpcgpu (#38)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run(run_argv(str(CHECK), "--expect", "1"), env=env, capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / ".hpcgpu").exists()
    user = tmp_path / "cache" / "hpcgpu" / "logs" / f".hpcgpu-{os.getuid()}"
    assert user.is_dir() and list(user.iterdir()) == []  # the job directory went
    (tmp_path / "mine").mkdir()
    done = subprocess.run(run_argv("--work-dir", "mine", str(CHECK), "--expect", "1"), env=env,
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "mine").is_dir() and list((tmp_path / "mine").iterdir()) == []


def test_refuses_bad_input_before_starting_anything(tmp_path, monkeypatch):
    """In this process (click's runner): a refusal needs no interpreter of its own; the
    tests above run ``python -m hpcgpu run`` itself."""
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, run_argv("--min-workers", "5", str(CHECK))[3:],
                              env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert done.exit_code == 2, (done.output, done.exception)
    assert "min_workers=5 must be between 1 and the allocation's 2 GPU(s)" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing made, no ./.hpcgpu
