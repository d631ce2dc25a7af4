"""Every process hpcgpu starts, in every mode: forked by one thread that lives as long as
this process, ended with it, with a normal signal mask.

A child gets SIGTERM from the kernel when this process ends, however it ends
(``PR_SET_PDEATHSIG``): nothing hpcgpu starts is left behind by a ``kill -9``, where no
batch system's process tracking reaches it (a process in a session of its own under SLURM's
``proctrack/linuxproc``). The kernel sends that signal when the *thread* that forked the
child ends, not the process; so one thread forks them all (:class:`_Spawner`), whichever
thread asks, a pool thread that ends when idle included. That thread blocks the stop
signals (:mod:`hpcgpu.system.threadsignals`), and a signal mask survives ``exec``: the
child unblocks them before it execs.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Callable, Sequence

from hpcgpu.system.threadsignals import start_thread, unblock_in_child

__all__ = ["fork", "run", "start_process"]


def start_process(argv: Sequence[str], die_with_parent: bool = True,
                  **popen_options) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen_options)``, forked by the spawner thread: with
    ``die_with_parent`` (Linux), the process gets SIGTERM when this process ends; its
    signal mask is a normal process's, whichever thread asks. :func:`~hpcgpu.runner.processes.start_child`
    for a child in a process group of its own, stopped whole.

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
        # reentrant: a signal handler (hpcgpu's cancel on SIGTERM) may start a process while
        # the main thread it interrupted holds it
        self._lock = threading.RLock()

    def call(self, make: Callable[[], object]):
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
if hasattr(os, "register_at_fork"):  # a forked child has no spawner thread, and no lock held
    os.register_at_fork(after_in_child=lambda: _spawner.__init__())


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


def fork(child: Callable[[], None]) -> int:
    """``os.fork()`` on the spawner thread, with what :func:`start_process` gives a child
    before its ``exec`` (the normal signal mask, SIGTERM when this process ends). In the
    child, that thread runs ``child()``, which must end the process (``os._exit``); here,
    returns the child's pid."""
    preexec = _in_child(sys.platform == "linux")

    def make() -> int:
        pid = os.fork()
        if pid == 0:
            try:
                preexec()
                child()
            finally:
                os._exit(1)
        return pid

    return _spawner.call(make)


def run(argv: Sequence[str], timeout: float, input: str | None = None,
        **popen_options) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
    **popen_options)`` through :func:`start_process`: killed on timeout
    (``subprocess.TimeoutExpired``), and with this process.

    Examples
    --------
    >>> run(["echo", "hi"], timeout=10).stdout
    'hi\\n'
    """
    stdin = subprocess.PIPE if input is not None else None
    with start_process(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, **popen_options) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    return subprocess.CompletedProcess(list(argv), process.returncode, out, err)
