"""A clean end, whatever the end (issue 15, item 6), against the real local SLURM.

A user's script (tests/exit_script.py) makes a cluster whose job runs and one whose job
is pending, then ends: ``close()``, no ``close()``, an uncaught ``TimeoutError``, SIGTERM,
SIGKILL. Afterwards none of its jobs is in the queue (SIGKILL: the running one ends by
itself), no file holds the TLS key, stderr holds no traceback but the user's own, and the
log of the job that ran holds none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, wait_for

pytestmark = pytest.mark.slurm
SCRIPT = ROOT / "tests" / "exit_script.py"


def _in_queue(job_ids: list[str]) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)],
                         capture_output=True, text=True).stdout
    return sorted(set(out.split()) & set(job_ids))


class Run:
    """The script running in its own Python, its output captured in files."""

    def __init__(self, mode: str, tmp_path: Path) -> None:
        self.logs = tmp_path / "logs"
        self.out, self.err = tmp_path / "stdout", tmp_path / "stderr"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen([sys.executable, str(SCRIPT), mode, str(self.logs)],
                                            stdout=out, stderr=err, env=env, cwd=tmp_path)
        self.job_ids: list[str] = []

    def wait_ready(self) -> None:
        wait_for(lambda: "READY" in self.out.read_text() or self.process.poll() is not None,
                 240, what="the script's workers")
        for line in self.out.read_text().splitlines():
            if line.startswith("JOBS"):
                self.job_ids = line.split()[1:]
        assert "READY" in self.out.read_text(), self.err.read_text()[-3000:]
        assert len(self.job_ids) == 2

    def finish(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()

    def cleanup(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        left = _in_queue(self.job_ids) if self.job_ids else []
        if left:
            subprocess.run(["scancel", *left])


@pytest.fixture
def run(slurm, tmp_path):
    made = []

    def start(mode: str) -> Run:
        made.append(Run(mode, tmp_path))
        return made[-1]

    yield start
    for script in made:
        script.cleanup()


def _no_key_anywhere(run: Run, key_marker: str = "PRIVATE KEY") -> None:
    """No file under the log directory or the working directory holds a private key."""
    for path in run.logs.parent.rglob("*"):
        if path.is_file():
            assert key_marker not in path.read_text(errors="ignore"), path


def _no_traceback_in_job_log(run: Run) -> None:
    logs = sorted(run.logs.glob(f"*-{run.job_ids[0]}.err"))
    assert logs, sorted(run.logs.iterdir())
    text = logs[0].read_text()
    assert "End worker" in text and "Traceback" not in text, text[-4000:]


@pytest.mark.parametrize("mode", ["close", "noclose", "timeout"])
def test_every_job_cancelled_no_traceback_no_key(run, mode):
    script = run(mode)
    script.wait_ready()
    code = script.finish()
    stderr = script.err.read_text()
    if mode == "timeout":
        assert code == 1
        # The user's own exception is the one traceback.
        assert stderr.count("Traceback") == 1, stderr[-5000:]
        assert "TimeoutError: 0 of 1 workers connected" in stderr
    else:
        assert code == 0 and "Traceback" not in stderr, stderr[-5000:]
    assert "cannot schedule new futures" not in stderr
    # Pending and running: none left, at once (the script waited for them to end).
    assert _in_queue(script.job_ids) == [], stderr[-3000:]
    _no_key_anywhere(script)
    _no_traceback_in_job_log(script)


def test_sigterm_cancels_every_job_and_dies_of_it(run):
    script = run("wait")
    script.wait_ready()
    script.process.send_signal(signal.SIGTERM)
    assert script.finish() == -signal.SIGTERM  # died of the signal, as without hpcgpu
    stderr = script.err.read_text()
    assert "Traceback" not in stderr, stderr[-5000:]
    wait_for(lambda: not _in_queue(script.job_ids), 30, what="the jobs to leave the queue")
    _no_key_anywhere(script)


def test_sigkill_workers_end_by_themselves_and_the_next_cluster_removes_the_key(run):
    script = run("wait")
    script.wait_ready()
    script.process.send_signal(signal.SIGKILL)
    assert script.finish() == -signal.SIGKILL
    running, pending = script.job_ids
    # Nothing in the client ran: the running job's workers saw the scheduler go and ended.
    wait_for(lambda: running not in _in_queue([running]), 60,
             what="the running job to end by itself")
    # The pending job cannot be cancelled by a dead client: when it starts, its workers
    # find no scheduler and end after death_timeout (docs/reliability.md).
    assert _in_queue([pending]) == [pending]
    # The killed client could not remove its private directory: the key is only there,
    # for the user alone, and the next cluster of this user and host removes it.
    private = list(script.logs.rglob("key.pem"))
    assert private and {oct(p.stat().st_mode & 0o777) for p in private} == {"0o600"}, private
    assert {oct(p.parent.stat().st_mode & 0o777) for p in private} == {"0o700"}
    from hpcgpu.cluster.batch.private import PrivateDirectory

    fresh = PrivateDirectory(str(script.logs), "next")
    assert fresh.path.exists() and not any(p.parent.exists() for p in private)
    fresh.remove()
    _no_key_anywhere(script)
