"""Files that say where to connect, written by one process and read by another (#38): a
reader takes only one that no other user could have written (hpcgpu.system.schedfile)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from attacker import NOBODY, as_nobody, can_act_as_nobody
from hpcgpu.system.schedfile import read_trusted_json

pytestmark = pytest.mark.skipif(not can_act_as_nobody(), reason="needs root to act as nobody")
GOOD = {"address": "tls://127.0.0.1:1"}


@pytest.fixture
def scratch():
    """A sticky directory every user may write (mode 1777) under one all may enter."""
    base = Path(tempfile.mkdtemp(prefix="hpcgpu-schedfile-"))
    os.chmod(base, 0o755)
    (base / "scratch").mkdir()
    os.chmod(base / "scratch", 0o1777)
    yield base / "scratch"
    shutil.rmtree(base, ignore_errors=True)


def plant(path: Path, mode: int = 0o644) -> None:
    """nobody writes a scheduler file of theirs at ``path``."""
    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        os.write(fd, json.dumps({"address": "tls://10.6.6.6:666"}).encode())
        os.close(fd)
    as_nobody(write)


def test_a_file_another_user_planted_in_a_sticky_directory_is_refused(scratch):
    plant(scratch / "s.json")
    with pytest.raises(ValueError, match=r"scheduler_file .*/s.json: .*/scratch has the sticky "
                                         r"bit, but the entry below it belongs to uid 65534"):
        read_trusted_json(scratch / "s.json", "scheduler_file")


def test_a_file_of_ones_own_in_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "s.json").write_text(json.dumps(GOOD))
    with pytest.raises(ValueError, match="shared is writable by every user"):
        read_trusted_json(shared / "s.json", "scheduler_file")
    os.chmod(shared, 0o755)
    assert read_trusted_json(shared / "s.json", "scheduler_file") == GOOD


def test_hpcgpus_own_files_must_be_0600_and_newer_than_the_run(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(GOOD))
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="has mode 0644, not 0600"):
        read_trusted_json(path, "scheduler_file", private=True)
    os.chmod(path, 0o600)
    assert read_trusted_json(path, "scheduler_file", private=True) == GOOD
    later = time.time() + 60  # a run that started after the file was written
    assert read_trusted_json(path, "scheduler_file", private=True, not_before=later) is None
    os.utime(path, (time.time() + 3600, time.time() + 3600))  # a modification time proves nothing
    assert read_trusted_json(path, "scheduler_file", private=True, not_before=later) is None


def test_the_worker_refuses_a_planted_scheduler_file_before_it_starts(scratch):
    plant(scratch / "hpcgpu-scheduler.json")
    done = subprocess.run([sys.executable, "-m", "hpcgpu.worker", "--scheduler-file",
                           str(scratch / "hpcgpu-scheduler.json")],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--scheduler-file" in done.stderr and "belongs to uid 65534" in done.stderr, done.stderr


def test_get_client_takes_hpcgpu_runs_file_only_as_hpcgpu_run_writes_it(tmp_path, monkeypatch):
    import dask

    from hpcgpu.runner.client import scheduler_address

    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps(GOOD))
    os.chmod(path, 0o644)
    monkeypatch.setenv("HPCGPU_SCHEDULER_FILE", str(path))
    with dask.config.set({"scheduler-address": None}):
        with pytest.raises(ValueError, match="HPCGPU_SCHEDULER_FILE .* has mode 0644, not 0600"):
            scheduler_address()
        os.chmod(path, 0o600)
        assert scheduler_address() == GOOD["address"]


def test_the_doctor_job_is_not_submitted_from_a_directory_others_can_change(tmp_path, monkeypatch):
    """The doctor's job script is submitted by path: the same rule for its directory."""
    from hpcgpu.doctor.job import run_doctor_job
    from hpcgpu.network import NetworkSettings

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.chdir(shared)
    monkeypatch.setattr("hpcgpu.system.commands.run", lambda *a, **k: pytest.fail("submitted"))
    with pytest.raises(ValueError, match=r"hpcgpu doctor --job's directory .*shared is writable "
                                         r"by every user .*run it from a directory only you"):
        run_doctor_job(NetworkSettings.create("tcp"), "slurm")
    assert os.listdir(shared) == []
