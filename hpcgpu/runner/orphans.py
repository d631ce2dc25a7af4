"""No orphan: while a run is guarded, a reaper process ends its process groups if it dies.

:func:`guarded` starts :mod:`hpcgpu.runner.reaper` with a pipe that only this process
holds; :func:`~hpcgpu.runner.processes.start_child` reports each child's process group to
it (:func:`track`), and :meth:`~hpcgpu.runner.processes.Child.wait_group` each group that
has emptied (:func:`untrack`), so that the reaper never signals a process group number
that the system has given to someone else since. At the guard's end the reaper is told
that the run stopped in order and exits; if this process dies first, the pipe's end tells it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from typing import IO, Iterator

from hpcgpu.system.threadsignals import preexec
from hpcgpu.system.pymain import module_argv

__all__ = ["guarded", "track", "untrack"]

_lock = threading.Lock()
_pipe: IO[str] | None = None


def _tell(line: str) -> None:
    with _lock:
        if _pipe is None:
            return
        try:
            _pipe.write(line + "\n")
            _pipe.flush()
        except (OSError, ValueError):  # the reaper is gone: nothing to tell
            pass


def track(pgid: int) -> None:
    """A child's process group started (nothing happens outside :func:`guarded`)."""
    _tell(f"+{pgid}")


def untrack(pgid: int) -> None:
    """A child's process group has no live process left."""
    _tell(f"-{pgid}")


@contextlib.contextmanager
def guarded(grace: float) -> Iterator[subprocess.Popen]:
    """Guard the process groups started inside the block: if this process dies before the
    block ends, each gets SIGTERM, and SIGKILL after ``grace`` s.

    Examples
    --------
    >>> with guarded(1.0) as reaper:
    ...     reaper.poll() is None
    True
    >>> reaper.wait(10)
    0
    """
    global _pipe
    # Its own session: a terminal's Ctrl-C or the job's SIGTERM is for the run, not for it.
    reaper = subprocess.Popen(module_argv([sys.executable, "-m", "hpcgpu.runner.reaper", f"{grace:g}"]),
                              stdin=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=preexec())
    with _lock:
        previous, _pipe = _pipe, reaper.stdin
    try:
        yield reaper
    finally:
        _tell("end")
        with _lock:
            _pipe = previous
        try:
            reaper.stdin.close()
        except OSError:
            pass
        try:
            reaper.wait(5)
        except subprocess.TimeoutExpired:
            reaper.kill()
