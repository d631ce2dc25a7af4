"""The key files batch mode writes: 0600 in a 0700 directory of the user's, never on a
command line, removed on every exit path (normal: test_batch_local; SIGTERM and an error
here; scancel: test_batch_cancel)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from batchtools import CHECK, processes_with
from conftest import wait_for
from hpcgpu.cli import main
from hpcgpu.runner.jobdir import open_job_directory
from hpcgpu.runner.security import make_private_directory, write_tls


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)  # a careless umask: nothing may rely on it
    try:
        job = open_job_directory(str(tmp_path / "work"), "slurm", "9")
        files, _ = write_tls(job.held)
    finally:
        os.umask(old)
    assert mode(job.path) == mode(job.path.parent) == 0o700
    assert mode(job.path / "owner") == 0o600
    assert {Path(p).name: mode(Path(p)) for p in (files.ca_file, files.cert, files.key)} == {
        "ca.pem": 0o600, "cert.pem": 0o600, "key.pem": 0o600}


def test_an_existing_path_or_link_is_never_used(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        make_private_directory(tmp_path / "link")


def run_argv(work: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "hpcgpu", "run", "--dashboard-address", "", "--grace", "5",
            "--work-dir", str(work), *args]


def test_no_key_on_a_command_line_and_none_left_after_sigterm(tmp_path):
    marker = uuid.uuid4().hex
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", HPCGPU_TEST_MARKER=marker)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(run_argv(work, str(CHECK), "--marker", str(tmp_path / "started"),
                                     "--sleep", "300"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (tmp_path / "started").exists() or proc.poll() is not None, 180,
                 what="the script to start")
        (key,) = work.glob("*/key.pem")
        assert (mode(key.parent), mode(key)) == (0o700, 0o600)
        secret = key.read_text().splitlines()[1]  # a line of the key itself
        running = processes_with(f"HPCGPU_TEST_MARKER={marker}")
        assert len(running) >= 4, running  # hpcgpu run, scheduler, worker(s), script
        assert all(secret not in cmdline and "PRIVATE KEY" not in cmdline for _, cmdline in running)
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == 143, output[-3000:]
    assert list(work.iterdir()) == [], output[-3000:]


def test_no_key_left_when_the_workers_cannot_start(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(run_argv(work, "--worker-args", "--preload no_such_module_here",
                                   str(CHECK), "--expect", "1"),
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"), capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "hpcgpu run: error:" in done.stderr, done.stderr[-3000:]
    assert list(work.iterdir()) == [], done.stderr[-3000:]


#: connects (distributed.Client() from the environment hpcgpu run gives it), computes, and
#: lists every file of the job directory that holds a key or certificate: none may
NO_FILES_SCRIPT = """
import pathlib, sys
from distributed import Client
with Client(timeout="60s") as client:
    assert client.submit(sum, [1, 2]).result(timeout=60) == 3
    found = [str(p) for p in pathlib.Path(sys.argv[1]).rglob("*") if p.is_file()
             and (p.suffix == ".pem" or "-----BEGIN" in p.read_text(errors="replace"))]
print("key files:", found, flush=True)
sys.exit(3 if found else 0)
"""


def test_no_key_files_the_certificate_never_touches_a_disk(tmp_path):
    """``--no-key-files`` (#38: "where the launcher allows, no key file at all"): the
    scheduler, the workers and the script's client get the PEM texts in their environment;
    the job directory holds no key while they compute."""
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "no_files.py"
    script.write_text(NO_FILES_SCRIPT)
    done = subprocess.run(run_argv(work, "--no-key-files", "--launcher", "direct", str(script), str(work)),
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"), capture_output=True,
                          text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "key files: []" in done.stdout
    assert "scheduler tls://" in done.stderr
    assert list(work.iterdir()) == []


def test_no_key_files_is_refused_where_the_launcher_may_drop_the_environment(tmp_path, monkeypatch):
    """In this process (click's runner): a refusal needs no interpreter of its own."""
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, run_argv(tmp_path, "--no-key-files", "--launcher", "mpirun", str(CHECK))[3:],
                              env={"CUDA_VISIBLE_DEVICES": "0"})
    assert done.exit_code == 2, (done.output, done.exception)
    assert "--no-key-files: launcher 'mpirun' may not give every task" in done.stderr
    assert list(tmp_path.iterdir()) == []  # refused before the job directory was made
