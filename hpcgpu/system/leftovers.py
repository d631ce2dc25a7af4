"""Paths removed when this process ends, however it ends: normal exit, Ctrl-C, SIGTERM, SIGKILL.

A ``finally`` block or an ``atexit`` hook runs at a normal exit and after Ctrl-C
(``KeyboardInterrupt``), not when the process dies of SIGTERM with Python's default action
(a batch system's cancel, ``kill``), nor of SIGKILL. A directory that must not outlive its
process (a secret key's) is therefore also handed to a keeper: a small stdlib-only process,
started when the first path is registered, that reads lines on its standard input, which
only this process holds open:

- ``+PATH``: remove ``PATH`` (a directory tree or a file) once this process has ended;
- ``-PATH``: forget it (this process removed it itself).

At end of input (this process ended, however, or it forgot its last path and closed the
pipe) the keeper removes every path it still holds and exits. It ignores SIGTERM, SIGINT
and SIGHUP: a batch system's cancel and a terminal's Ctrl-C reach every process of the job
or the process group, and the keeper must outlive its owner by the moment it takes to
remove what is left. A forked child does not inherit the pipe (:func:`os.register_at_fork`):
its own registrations start a keeper of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from hpcgpu.system.spawn import start_process

__all__ = ["KEEPER", "remove_at_end", "forget"]

#: The keeper's program (``python -I -S -c``: no site, starts in ~20 ms).
KEEPER = """
import os, shutil, signal, sys
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
held = set()
for line in sys.stdin.buffer:
    path = os.fsdecode(line.rstrip(b"\\n")[1:])
    if line[:1] == b"+":
        held.add(path)
    elif line[:1] == b"-":
        held.discard(path)
for path in held:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
"""

_lock = threading.Lock()
_keeper: subprocess.Popen | None = None
_pipe = -1  # the writing end of the keeper's input, a bare descriptor: a fork closes it
_held: set[str] = set()


def _send(line: str) -> None:
    try:
        os.write(_pipe, os.fsencode(line) + b"\n")  # one short write: never interleaved
    except OSError:  # the keeper is gone (killed): nothing else to do
        pass


def _start_keeper() -> None:
    global _keeper, _pipe
    read, _pipe = os.pipe()  # both close-on-exec: the keeper gets ``read`` as its stdin only
    try:
        _keeper = start_process([sys.executable, "-I", "-S", "-c", KEEPER], die_with_parent=False,
                                stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except BaseException:
        os.close(_pipe)
        _pipe = -1
        raise
    finally:
        os.close(read)


def remove_at_end(path: str | os.PathLike) -> None:
    """Have ``path`` removed when this process ends, unless :func:`forget` comes first.

    Examples
    --------
    >>> import tempfile, time
    >>> d = tempfile.mkdtemp()
    >>> remove_at_end(d); forget(d)  # removed by the caller: nothing happens to it
    >>> os.path.isdir(d)
    True
    """
    path = os.path.abspath(os.fspath(path))
    if "\n" in path:
        raise ValueError(f"{path!r}: a path with a newline cannot be handed to the keeper")
    with _lock:
        if _keeper is None:
            _start_keeper()
        _held.add(path)
        _send("+" + path)


def forget(path: str | os.PathLike) -> None:
    """Stop keeping ``path`` (removed already, or to be kept); the keeper exits with the last."""
    global _keeper, _pipe
    path = os.path.abspath(os.fspath(path))
    with _lock:
        if path not in _held:
            return
        _held.discard(path)
        _send("-" + path)
        if not _held:  # end of input: the keeper exits at once, holding nothing
            keeper, _keeper = _keeper, None
            os.close(_pipe)
            _pipe = -1
            try:
                keeper.wait(5)
            except subprocess.TimeoutExpired:  # slow machine: reaped by subprocess later
                pass


def _in_forked_child() -> None:
    """The parent's pipe and paths are the parent's: close the copy, start afresh."""
    global _keeper, _lock, _pipe
    _lock = threading.Lock()
    if _pipe >= 0:
        os.close(_pipe)
    _keeper, _pipe = None, -1
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)
