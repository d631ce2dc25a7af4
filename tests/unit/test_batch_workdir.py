"""#38 break 1: ``hpcgpu run``'s job directory in a shared directory. Another user (a thread
acting as ``nobody``) swaps the job directory for one of their own, with their scheduler's
address, at 0, 5, 20 and 50 ms after it appears: 200 attempts, no success, each attempt
either refused with its message or run on the victim's own directory and scheduler.

With the old code (``./.hpcgpu`` made by path, the first readable ``scheduler.json`` won)
the attacker won 10 of 40 such attempts (at 0 and 5 ms)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from attacker import NOBODY, become_nobody_in_this_thread, can_act_as_nobody
from fake_scheduler import ADDRESS
from hpcgpu.runner.jobdir import open_job_directory
from hpcgpu.runner.scheduler import SchedulerOptions, start_scheduler
from hpcgpu.runner.security import write_tls

pytestmark = pytest.mark.skipif(not can_act_as_nobody(), reason="needs root to act as nobody")

EVIL = "tls://10.6.6.6:666"
DELAYS = (0.0, 0.005, 0.020, 0.050)
ATTEMPTS = 200


@pytest.fixture
def shared():
    """A scratch directory every user may write, with the sticky bit (mode 1777), where
    ``nobody`` has made ``.hpcgpu`` (0777) first; and a stand-in scheduler that starts fast."""
    base = Path(tempfile.mkdtemp(prefix="hpcgpu-scratch-"))
    os.chmod(base, 0o755)
    scratch = base / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)
    theirs = scratch / ".hpcgpu"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    os.chmod(theirs, 0o777)
    python = base / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S "
                      f"{Path(__file__).parents[1] / 'fake_scheduler.py'} \"$@\"\n")
    python.chmod(0o755)
    yield scratch, str(python)
    shutil.rmtree(base, ignore_errors=True)


_libc = ctypes.CDLL(None, use_errno=True)
_IN_NEW = 0x100 | 0x80  # IN_CREATE | IN_MOVED_TO: a name appeared in the directory


class Attacker(threading.Thread):
    """As nobody: when a new directory appears in ``where``, wait ``delay``, rename it away
    and put one of nobody's there, with their scheduler file and credentials. Woken by
    inotify, as the review's attacker was (a thread that polled ``listdir`` in a loop was as
    quick, but held a core through all the attempts)."""

    def __init__(self, where: Path, delay: float) -> None:
        super().__init__(daemon=True, name="attacker")
        self.where, self.delay = where, delay
        self.done, self.watching, self.swapped, self.denied = threading.Event(), threading.Event(), 0, 0
        self.before = set(os.listdir(where))
        self._wake = os.pipe()

    def start(self) -> None:
        """Returns once the watch is set, so that the victim's directory cannot appear unseen."""
        super().start()
        assert self.watching.wait(10), f"the attacker could not watch {self.where}"

    def stop(self) -> None:
        self.done.set()
        os.write(self._wake[1], b"x")
        self.join()
        for fd in self._wake:
            os.close(fd)

    def run(self) -> None:
        become_nobody_in_this_thread()
        watch = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if watch < 0 or _libc.inotify_add_watch(watch, os.fsencode(self.where), _IN_NEW) < 0:
            return  # start() says so
        self.watching.set()
        try:
            while not self.done.is_set():
                for name in set(os.listdir(self.where)) - self.before:
                    self.before.add(name)
                    time.sleep(self.delay)  # the attack's timing, not a wait for the test
                    self.swap(self.where / name)
                if watch in select.select([watch, self._wake[0]], [], [])[0]:
                    os.read(watch, 65536)
        finally:
            os.close(watch)

    def swap(self, victim: Path) -> None:
        self.before.add(victim.name + ".away")
        try:
            os.rename(victim, victim.with_name(victim.name + ".away"))
        except OSError:
            self.denied += 1
            return
        victim.mkdir(mode=0o777)
        for name, text in (("scheduler.json", json.dumps({"address": EVIL})),
                           ("ca.pem", "evil"), ("cert.pem", "evil"), ("key.pem", "evil")):
            (victim / name).write_text(text)
        self.swapped += 1


def victim(work_dir: str, python: str) -> tuple[str, Path]:
    """What ``hpcgpu run`` does before its workers start: the job directory, the TLS files,
    the scheduler and its address."""
    job = open_job_directory(work_dir, "slurm", "77")
    try:
        files, _ = write_tls(job.held)
        child, info = start_scheduler(python, SchedulerOptions(dashboard_address=None), files,
                                      dict(os.environ), timeout=30)
        child.stop(grace=2)
        held, there = os.fstat(job.held.fd), os.lstat(job.path)
        assert os.path.samestat(held, there) and there.st_uid == os.geteuid(), "directory swapped"
        assert all(os.stat(p).st_uid == os.geteuid() for p in (files.ca_file, files.key))
        return info["address"], job.path
    finally:
        job.remove()
        job.close()


def test_no_swap_of_the_job_directory_succeeds(shared):
    scratch, python = shared
    outcomes: dict[str, int] = {}
    layouts = {
        # the reproduction: cd scratch; hpcgpu run (then ./.hpcgpu, nobody's)
        "their .hpcgpu": str(scratch / ".hpcgpu"),
        # a sticky scratch directory itself: accepted, and nobody cannot rename our entry
        "sticky scratch": str(scratch),
    }
    for attempt in range(ATTEMPTS):
        delay = DELAYS[attempt % len(DELAYS)]
        layout = list(layouts)[(attempt // len(DELAYS)) % len(layouts)]
        work = layouts[layout]
        attacker = Attacker(Path(work), delay)
        attacker.start()
        try:
            address, _ = victim(work, python)
            assert address == ADDRESS, f"attempt {attempt} ({layout}, {delay}): {address}"
            outcome = f"{layout}: ran on its own scheduler"
        except ValueError as refused:
            assert layout == "their .hpcgpu", refused
            assert str(refused).startswith(
                f"--work-dir {work}: {scratch} has the sticky bit, but the entry below it "
                f"belongs to uid {NOBODY}, who can rename it: another user could replace what "
                "hpcgpu makes below it and run code as you; leave --work-dir out"), refused
            outcome = f"{layout}: refused"
        finally:
            attacker.stop()
        assert attacker.swapped == 0, f"attempt {attempt} ({layout}, {delay} s): swapped"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes == {"their .hpcgpu: refused": 100, "sticky scratch: ran on its own scheduler": 100}


def test_the_attacker_thread_can_swap_where_the_rule_would_allow_it(shared):
    """The attack works where it may (so the test above can fail): in nobody's ``.hpcgpu``,
    a directory made there by path is renamed away and replaced."""
    scratch, _ = shared
    attacker = Attacker(scratch / ".hpcgpu", 0.0)
    attacker.start()
    (scratch / ".hpcgpu" / "77-made-by-path").mkdir()
    deadline = time.monotonic() + 10
    while not attacker.swapped and time.monotonic() < deadline:
        time.sleep(0.01)
    attacker.stop()
    assert attacker.swapped == 1
    assert (scratch / ".hpcgpu" / "77-made-by-path").stat().st_uid == NOBODY


def test_group_and_world_writable_work_dirs_are_refused_with_the_fix(tmp_path):
    for mode, reason in ((0o777, "is writable by every user (mode 0777) and has no sticky bit"),
                         (0o770, "is writable by the members of group")):
        work = tmp_path / f"w{mode:o}"
        work.mkdir()
        os.chown(work, 0, NOBODY)
        os.chmod(work, mode)
        with pytest.raises(ValueError, match=re.escape(f"--work-dir {work}: {work} {reason}")
                           + r".*leave --work-dir out .*mkdir -m 700 ~/hpcgpu-work"):
            open_job_directory(str(work), None, None)
        assert list(work.iterdir()) == []


def test_the_default_is_the_per_user_private_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = open_job_directory(None, None, None)
    try:
        assert job.path.parent == tmp_path / "cache" / "hpcgpu" / "logs" / f".hpcgpu-{os.getuid()}"
        assert oct(job.path.parent.stat().st_mode & 0o777) == "0o700"
    finally:
        job.remove()
        job.close()


def test_a_later_run_prunes_job_directories_whose_process_is_gone(tmp_path):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    import socket
    for name, pid in (("1-dead", 2**22 + 1), ("2-alive", os.getpid())):
        (work / name).mkdir()
        (work / name / "owner").write_text(f"{socket.gethostname()} {pid} slurm:1\n")
    job = open_job_directory(str(work), None, None)
    try:
        assert sorted(p.name for p in work.iterdir()) == sorted(["2-alive", job.path.name])
    finally:
        job.remove()
        job.close()


def test_the_runners_client_trusts_the_ca_in_memory_not_the_file(tmp_path):
    """A ca.pem swapped on disk cannot make hpcgpu run's own client trust another scheduler."""
    job = open_job_directory(str(tmp_path / "work"), None, None)
    try:
        files, own = write_tls(job.held)
        ours = Path(files.ca_file).read_text()
        os.unlink(files.ca_file)
        Path(files.ca_file).write_text("another CA")
        security = own.security()
        assert security.tls_ca_file == ours and security.tls_client_key == own.key
        assert "PRIVATE KEY" in security.tls_client_key  # the text itself, not a path
    finally:
        job.remove()
        job.close()
