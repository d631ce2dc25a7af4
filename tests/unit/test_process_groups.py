"""``hpcgpu run``'s children are stopped as whole process groups: a group whose processes
have all exited is done, even while one of them waits, a zombie, for its reaping."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from hpcgpu.runner.processes import start_child

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups read from /proc")

# The leader forks a keeper, which forks a member and moves itself to a group of its own.
# The member exits; its parent, the keeper, is outside the group and does not reap it, so
# the group holds one zombie only, as when init is slow to reap an orphan.
ZOMBIE_IN_GROUP = r"""
import os, sys, time
if os.fork() == 0:
    if os.fork() == 0:
        os._exit(0)
    os.setpgid(0, 0)
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(0)
"""


def test_a_group_left_with_only_a_zombie_is_done(tmp_path):
    keeper_file = tmp_path / "keeper"
    child = start_child("zombie-maker", [sys.executable, "-c", ZOMBIE_IN_GROUP, str(keeper_file)])
    deadline = time.monotonic() + 30
    while not keeper_file.exists() or not keeper_file.read_text():
        assert time.monotonic() < deadline, "the keeper process did not start"
        time.sleep(0.05)
    keeper = int(keeper_file.read_text())
    try:
        assert child.wait(30) == 0
        os.killpg(child.pid, 0)  # the group still exists for the kernel: the zombie is in it
        assert child.wait_group(5.0)  # before: False after 5 s, the zombie counted as alive
        assert not child.group_alive()
    finally:
        os.kill(keeper, signal.SIGKILL)


def test_a_group_with_a_running_process_is_alive():
    child = start_child("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.group_alive()
        assert not child.wait_group(0.3)
    finally:
        assert child.stop(grace=5) == -signal.SIGTERM
    assert not child.group_alive()
