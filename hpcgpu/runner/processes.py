"""Child processes that hpcgpu owns: started in their own process group, stopped whole,
never left behind.

Each background child (the Dask scheduler, the launcher with its workers, the user's
script, rank 0's worker) gets its own session, so that a terminal's Ctrl-C reaches
``hpcgpu run`` only and the shutdown happens in order, and so that stopping it reaches
everything it started (``direct`` workers, nannies, ``mpirun``'s daemons).

A child in a session of its own is out of reach of whoever signals its parent's process
group (SLURM's ``proctrack/linuxproc`` and ``pgid``, a shell's job control). So every
child gets SIGTERM from the kernel when this process ends, however it ends
(``PR_SET_PDEATHSIG``, :mod:`hpcgpu.system.spawn`); :mod:`hpcgpu.runner.orphans` does the
rest (the groups, SIGKILL).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Mapping, Sequence

from hpcgpu.runner import orphans
from hpcgpu.runner.reaper import any_running_in_group
from hpcgpu.system.spawn import start_process
from hpcgpu.system.threadsignals import start_thread

__all__ = ["Child", "start_child", "fork_child", "start_process"]  # start_process: hpcgpu.system.spawn's


@dataclass
class Child:
    """A started child process and the name it is reported by."""

    name: str
    #: ``subprocess.Popen``, or :class:`~hpcgpu.runner.forkmain.ForkedProcess` (forked)
    popen: subprocess.Popen = field(repr=False)
    #: the last lines of its output, when it was started with ``keep_tail``
    tail: collections.deque | None = field(default=None, repr=False)
    readers: tuple[threading.Thread, ...] = field(default=(), repr=False)

    def output_tail(self, wait: float = 2.0) -> str:
        """The last lines the child wrote (stdout and stderr, in the order they came);
        after it exited, once its output is read to the end (at most ``wait`` s)."""
        if not self.running():
            for reader in self.readers:
                reader.join(wait)
        return "".join(self.tail or ())

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
        """Whether any process of the child's group has not exited yet.

        A zombie does not count: it has exited, and only its reaping is pending. An orphan's
        reaping is up to init, which some containers' init does only every second or two.
        """
        return any_running_in_group(self.popen.pid)

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
        if self.group_alive():
            return False
        orphans.untrack(self.popen.pid)  # its number may go to another group from now on
        return True

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
                keep_tail: int = 0, die_with_parent: bool = True, **popen_options) -> Child:
    """Start ``argv`` in a new session (its own process group).

    With ``die_with_parent`` (the default; Linux), the child gets SIGTERM when this process
    ends, however it ends: a launcher that kills this process (``MPI_Abort``, SIGKILL) does
    not reach a child in its own session otherwise. Inside
    :func:`~hpcgpu.runner.orphans.guarded`, its whole group gets SIGTERM then, and SIGKILL
    after the guard's grace.

    With ``keep_tail``, its stdout and stderr still reach this process's own, line by line,
    and the last ``keep_tail`` lines are kept (:meth:`Child.output_tail`): enough to say
    why it ended in one message.

    Examples
    --------
    >>> child = start_child("sleeper", ["sleep", "30"])
    >>> child.running()
    True
    >>> child.stop(grace=2)
    -15
    """
    if keep_tail:
        popen_options.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    popen = start_process(argv, env=None if env is None else dict(env), start_new_session=True,
                          die_with_parent=die_with_parent, **popen_options)
    orphans.track(popen.pid)  # a new session: its group's number is its pid
    if not keep_tail:
        return Child(name, popen)
    tail: collections.deque = collections.deque(maxlen=keep_tail)
    readers = tuple(start_thread(threading.Thread(
        target=_copy_lines, args=(source, sink, tail), daemon=True, name=f"hpcgpu-{name}-output"))
        for source, sink in ((popen.stdout, sys.stdout), (popen.stderr, sys.stderr)))
    return Child(name, popen, tail, readers)


def fork_child(name: str, main, argv: Sequence[str], env: Mapping[str, str],
               close_fds: Sequence[int] = ()) -> Child | None:
    """:func:`start_child` for a Python program forked from this process
    (:func:`~hpcgpu.runner.forkmain.fork_main`): ``main(argv[1:])`` in a session of its
    own, with ``env``, named ``name`` (its process name). None where this process cannot
    fork it (another thread runs): start it anew."""
    from hpcgpu.runner.forkmain import fork_main

    process = fork_main(main, argv, env, close_fds, name)
    if process is None:
        return None
    orphans.track(process.pid)
    return Child(name, process)


def _copy_lines(source: IO[bytes], sink: IO[str], tail: collections.deque) -> None:
    """Copy ``source`` to ``sink`` line by line until it closes, keeping the lines in ``tail``."""
    out = getattr(sink, "buffer", None)
    with source:
        for line in iter(source.readline, b""):
            tail.append(line.decode(errors="replace"))
            try:
                if out is not None:
                    sink.flush()  # keep the order with what this process wrote there itself
                    out.write(line)
                    out.flush()
                else:
                    sink.write(line.decode(errors="replace"))
            except (OSError, ValueError):  # the sink is closed: keep draining the pipe
                pass
