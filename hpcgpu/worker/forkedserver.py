"""A fork server forked from the launcher: one interpreter start-up per host.

Python's fork server (``multiprocessing`` method ``forkserver``) is a fresh interpreter that
imports its preload list again: with the launcher that makes two start-ups per host, each
paying for distributed, numpy and hpcgpu's worker modules. Here the launcher imports them
once, then forks the server itself before it starts a thread, a socket or an event loop,
and hands it to ``multiprocessing`` as its fork server. The worker processes are forked
from it as from Python's: they receive only the file descriptors they are sent, their
nanny's environment (``CUDA_VISIBLE_DEVICES`` set before anything can touch CUDA), and the
server exits when the launcher does.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import threading

from hpcgpu.worker.walltime import DRAIN_SIGNALS

__all__ = ["start_forked_server"]


def start_forked_server(preload: list[str]) -> int | None:
    """Import ``preload`` here, fork the fork server from this process and register it;
    returns its pid, or None (Python's own server will start) where forking is unsafe: a
    thread is running, or a server already runs.

    The server inherits this process as it is now: call it before any thread, listener or
    CUDA context exists (the launcher's start, never a worker's).
    """
    from multiprocessing import forkserver, util
    from multiprocessing.connection import arbitrary_address

    server = forkserver._forkserver
    if server._forkserver_pid is not None or threading.active_count() > 1:
        return None
    for name in preload:
        importlib.import_module(name)
    _fork_resource_tracker()  # as ForkServer.ensure_running: before the server
    listener = socket.socket(socket.AF_UNIX)
    address = _socket_path(arbitrary_address("AF_UNIX"))
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # the server exits when this process's end closes

    def serve() -> None:
        _outlive_job_signals()
        forkserver.main(listener.detach(), alive_r, preload=[])

    pid = _fork_running(serve, close=alive_w)
    listener.close()
    os.close(alive_r)
    server._forkserver_address, server._forkserver_alive_fd = address, alive_w
    server._forkserver_pid = pid
    return pid


def _fork_resource_tracker() -> None:
    """Start multiprocessing's resource tracker, which the fork server's protocol needs, as
    a fork of this process: Python spawns a fresh interpreter for it (about 0.06 CPU-s of
    start-up per launcher) to run a loop that reads a pipe.

    The tracker ignores the job's signals, as the server does; it reads the names of the
    semaphores the workers register and unlinks those left when every holder of the
    pipe's write end (this process, the server, the workers) has closed it.
    """
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    if tracker._fd is not None:
        return
    read, write = os.pipe()

    def track() -> None:
        for signum in (*DRAIN_SIGNALS, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        resource_tracker.main(read)

    pid = _fork_running(track, close=write)
    os.close(read)
    tracker._fd, tracker._pid = write, pid


def _fork_running(run, close: int) -> int:
    """Fork a child that closes ``close`` (this process's end of its pipe), runs ``run()``
    and exits, 0 unless it raised (``SystemExit`` counts as a normal end); its pid. The
    child never returns into the launcher's code."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(close)
            run()
        except SystemExit:
            pass
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return pid


def _outlive_job_signals() -> None:
    """In the server: a batch system's signals reach every process of the job step, the
    server too, whose default action would end it, and with it the exit reports of the
    workers forked from it (their nannies read exit code 255, "killed by unknown signal").
    For the drain signal (SLURM's ``USR1`` before the walltime) the nannies would take the
    drained workers for crashed ones and start them again; for ``TERM`` (scancel, the
    walltime) a nanny still starting its worker would not see the SIGTERM that ended it, and
    fail with a traceback. The server ignores them (it ends with the launcher, whose end of
    a pipe it watches); a worker forked later that sets no handler of its own gets the
    default, as a spawned one."""
    server = os.getpid()

    def handler(signum: int, _frame) -> None:
        if os.getpid() == server:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in (*DRAIN_SIGNALS, signal.SIGTERM):
        signal.signal(signum, handler)


def _socket_path(address: str) -> str:
    """``address`` (in multiprocessing's private directory under ``TMPDIR``), or, where that
    is too long for a Unix socket (108 bytes on Linux; sites and job scripts set long
    ``TMPDIR`` paths, and binding failed: ``AF_UNIX path too long``), the same name in a
    fresh directory of this user's only (mode 0700) under ``/tmp``, removed at exit. Never
    the abstract namespace: any user of the host could connect to it."""
    if len(os.fsencode(address)) < 100:
        return address
    import shutil
    import tempfile
    from multiprocessing import util

    short = tempfile.mkdtemp(prefix="hpcgpu-", dir="/tmp")
    util.Finalize(None, shutil.rmtree, args=[short, True], exitpriority=-100)
    return os.path.join(short, os.path.basename(address))
