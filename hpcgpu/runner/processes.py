"""Child processes that hpcgpu owns: started in their own process group, stopped whole,
never left behind.

Each background child (the Dask scheduler, the launcher with its workers, the user's
script, rank 0's worker) gets its own session, so that a terminal's Ctrl-C reaches
``hpcgpu run`` only and the shutdown happens in order, and so that stopping it reaches
everything it started (``direct`` workers, nannies, ``mpirun``'s daemons).

A child in a session of its own is out of reach of whoever signals its parent's process
group (SLURM's ``proctrack/linuxproc`` and ``pgid``, a shell's job control). So every
child gets SIGTERM from the kernel when this process ends, however it ends
(``PR_SET_PDEATHSIG``). The kernel sends it when the *thread* that forked the child ends,
so every child is forked by one thread that lives as long as the process
(:class:`_Spawner`); :mod:`hpcgpu.runner.orphans` does the rest (the groups, SIGKILL).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Mapping, Sequence

from hpcgpu.runner import orphans
from hpcgpu.runner.reaper import any_running_in_group
from hpcgpu.system.threadsignals import start_thread, unblock_in_child

__all__ = ["Child", "start_child", "start_process"]


@dataclass
class Child:
    """A started child process and the name it is reported by."""

    name: str
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


def start_process(argv: Sequence[str], die_with_parent: bool = True,
                  **popen_options) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen_options)``, forked by the spawner thread: with
    ``die_with_parent`` (Linux), the process gets SIGTERM when this process ends; its
    signal mask is a normal process's, whichever thread asks. :func:`start_child` for a
    child in a process group of its own, stopped whole.

    Examples
    --------
    >>> start_process(["true"]).wait(10)
    0
    """
    popen_options["preexec_fn"] = _in_child(die_with_parent and sys.platform == "linux")
    return _spawner.call(lambda: subprocess.Popen(list(argv), **popen_options))


class _Spawner:
    """The one thread that forks every child, born with the stop signals blocked
    (:mod:`hpcgpu.system.threadsignals`) and alive until the process ends: the death
    signal of a child comes when the thread that forked it ends, not the process."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()

    def call(self, make: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        """``make()`` on the spawner thread; its result, or its exception raised here."""
        if threading.current_thread() is self._thread:
            return make()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # first, or in a forked child
                self._requests = queue.SimpleQueue()
                self._thread = start_thread(threading.Thread(
                    target=self._serve, args=(self._requests,), daemon=True, name="hpcgpu-spawner"))
            requests = self._requests
        done: concurrent.futures.Future = concurrent.futures.Future()
        requests.put((make, done))
        return done.result()

    @staticmethod
    def _serve(requests: queue.SimpleQueue) -> None:
        while True:
            make, done = requests.get()
            try:
                done.set_result(make())
            except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
                done.set_exception(error)


_spawner = _Spawner()


def _in_child(die_with_parent: bool) -> Callable[[], None]:
    """A ``preexec_fn``: the signal mask of a normal process back (the spawner thread blocks
    the stop signals, and a mask survives ``exec``), and, with ``die_with_parent``,
    ``prctl(PR_SET_PDEATHSIG, SIGTERM)``. ``prctl`` is looked up before the fork, so that
    the child only makes the call."""
    if not die_with_parent:
        return unblock_in_child
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    set_death_signal, sigterm = 1, int(signal.SIGTERM)  # PR_SET_PDEATHSIG
    parent = os.getpid()

    def preexec() -> None:
        unblock_in_child()
        prctl(set_death_signal, sigterm)
        if os.getppid() != parent:  # the parent died before the prctl: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


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
