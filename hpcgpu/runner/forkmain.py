"""A Python program started as a fork of this process instead of a new interpreter.

``hpcgpu run`` has imported distributed before it starts the scheduler; a new interpreter
imports it again (about 0.6 CPU-s and as long in wall time on a busy node, before the
workers can be started). Forked, the scheduler starts from what is imported here. The
child is what ``python -c SAFE_MAIN module args`` would be, as far as the program can
tell: its environment (read again into Dask's configuration), ``sys.argv``, the working
directory off its import path, the signal handlers and mask of a new interpreter, a session
of its own and SIGTERM when this process ends. It holds this process's open descriptors but
those it is told to close (its end of a pipe), as the same user's process, and ends with
``os._exit``, never returning into this process's code.

:func:`fork_main` forks only where no other thread runs than the one that forks every
child; otherwise it returns None and the caller starts a new interpreter (a fork copies no
other thread, and what it held).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Callable, Mapping, Sequence

__all__ = ["ForkedProcess", "fork_main"]


class ForkedProcess:
    """What :class:`~hpcgpu.runner.processes.Child` uses of ``subprocess.Popen``, for a
    forked child: ``pid``, ``returncode``, ``poll()``, ``wait(timeout)``."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode, self.args = pid, None, ()

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost
                pid, status = self.pid, 255 << 8
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode


def fork_main(main: Callable[[Sequence[str]], object], argv: Sequence[str], env: Mapping[str, str],
              close_fds: Sequence[int] = (), name: str = "") -> ForkedProcess | None:
    """Fork; the child runs ``main(argv[1:])`` as a new interpreter would, in a session of its
    own, and exits with its code (``SystemExit``'s, 1 on an exception, else 0).

    ``close_fds``: this process's descriptors the child must not hold (its end of a pipe).
    ``name``: the child's process name (``/proc/PID/comm``: ``ps -o comm``, ``top``,
    ``pgrep NAME``; 15 bytes), as its command line stays this process's. It forks on
    :mod:`hpcgpu.system.spawn`'s thread, as every child hpcgpu starts; returns None where
    another thread runs here (it could hold a lock that the child would need).
    """
    others = [thread for thread in threading.enumerate()
              if thread is not threading.current_thread() and thread.name != "hpcgpu-spawner"]
    if others or sys.platform != "linux":
        return None
    from hpcgpu.system import spawn

    def child() -> None:  # spawn.fork gave it the death signal and the normal signal mask
        code = 1
        try:
            os.setsid()
            if name:
                with open("/proc/self/comm", "w") as comm:  # the process name (15 bytes)
                    comm.write(name[:15])
            for fd in close_fds:
                os.close(fd)
            _as_new_interpreter(argv, env)
            code = _exit_code(main, argv)
        except BaseException:  # noqa: BLE001 - the child never returns into the parent's code
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - closed: nothing more to say
                    pass
            os._exit(code)

    sys.stdout.flush()
    sys.stderr.flush()
    return ForkedProcess(spawn.fork(child))


def _as_new_interpreter(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Signals, environment, configuration, ``sys.argv`` and import path of a new
    ``python -c SAFE_MAIN`` (:mod:`hpcgpu.system.pymain`)."""
    import dask.config

    for signum in signal.valid_signals():
        if callable(signal.getsignal(signum)) and signum != signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.environ.clear()
    os.environ.update(env)
    dask.config.refresh()  # the defaults registered here, then files and DASK_* of ``env``
    sys.argv = list(argv)
    if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.realpath(os.getcwd()):
        del sys.path[0]  # python -m here put the (maybe shared) working directory first


def _exit_code(main: Callable[[Sequence[str]], object], argv: Sequence[str]) -> int:
    try:
        main(argv[1:])
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            return end.code or 0
        print(end.code, file=sys.stderr)
        return 1
    return 0
