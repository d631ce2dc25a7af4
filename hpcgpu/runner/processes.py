"""Child processes that ``hpcgpu run`` owns: started in their own process group, stopped whole.

Each background child (the Dask scheduler, the launcher with its workers) gets its own
session, so that a terminal's Ctrl-C reaches ``hpcgpu run`` only and the shutdown happens
in order, and so that stopping it reaches everything it started (``direct`` workers,
nannies, ``mpirun``'s daemons).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

__all__ = ["Child", "start_child"]


@dataclass
class Child:
    """A started child process and the name it is reported by."""

    name: str
    popen: subprocess.Popen = field(repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        """Whether the child itself has not exited yet."""
        return self.popen.poll() is None

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the child's whole process group (if any of it is left)."""
        try:
            os.killpg(self.popen.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        """Whether any process of the child's group is still there."""
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the child to exit; its exit code or None."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_group(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the child and everything in its group to exit."""
        deadline = time.monotonic() + timeout
        while self.group_alive() and time.monotonic() < deadline:
            self.popen.poll()  # reap the leader, or the group never empties
            time.sleep(0.05)
        return not self.group_alive()

    def stop(self, grace: float = 10.0, first: int = signal.SIGTERM) -> int | None:
        """Ask the group to stop with ``first``, SIGKILL what is left after ``grace`` s.

        Returns the child's exit code (None if it could not be reaped).
        """
        if self.group_alive():
            self.signal_group(first)
        if not self.wait_group(grace):
            self.signal_group(signal.SIGKILL)
        return self.wait(5)


def start_child(name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
                **popen_options) -> Child:
    """Start ``argv`` in a new session (its own process group).

    Examples
    --------
    >>> child = start_child("sleeper", ["sleep", "30"])
    >>> child.running()
    True
    >>> child.stop(grace=2)
    -15
    """
    popen = subprocess.Popen(list(argv), env=None if env is None else dict(env),
                             start_new_session=True, **popen_options)
    return Child(name, popen)
