"""The Dask scheduler of a batch job: an extra process on the first node that takes no GPU.

Its address comes back over a pipe (:mod:`hpcgpu.runner.address_pipe`), never from a file
that another process could have written.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from dataclasses import dataclass
from typing import Mapping

from hpcgpu.runner import address_pipe
from hpcgpu.runner.dashboard import DEFAULT_DASHBOARD
from hpcgpu.runner.processes import Child, fork_child, start_child
from hpcgpu.system.pymain import module_argv
from hpcgpu.runner.security import TLSFiles

__all__ = ["SchedulerOptions", "scheduler_argv", "start_scheduler", "SCHEDULER_NAME"]

#: the process name of a scheduler forked from ``hpcgpu run`` (``ps -o comm``, ``pgrep``):
#: its command line is ``hpcgpu run``'s
SCHEDULER_NAME = "dask-scheduler"


@dataclass(frozen=True)
class SchedulerOptions:
    """How the scheduler listens.

    Attributes
    ----------
    protocol : str
        ``tls`` (the default, with ``tls`` files), ``tcp`` or ``ucx``.
    interface : str or None
        Network interface, e.g. ``ib0``.
    dashboard_address : str or None
        Where the dashboard listens (``127.0.0.1:8787``: this node only; another port is
        taken when that one is in use); None turns it off.
    host : str or None
        The address to listen on where no interface is named
        (:func:`hpcgpu.network.routed.scheduler_host`); None: Dask's choice.
    """

    protocol: str = "tls"
    interface: str | None = None
    dashboard_address: str | None = DEFAULT_DASHBOARD
    host: str | None = None


def scheduler_argv(python: str, options: SchedulerOptions, tls: TLSFiles | None,
                   host: str | None = None) -> list[str]:
    """The scheduler's command line (distributed's own ``dask scheduler``); ``host``, the
    interface's address, stands for ``--interface``, which that command refuses beside TLS
    files ('Can not specify both interface and host').

    Examples
    --------
    >>> argv = scheduler_argv("python3", SchedulerOptions(dashboard_address=None),
    ...                       TLSFiles("/j/ca.pem", "/j/cert.pem", "/j/key.pem"))
    >>> " ".join(argv)  # doctest: +NORMALIZE_WHITESPACE
    'python3 -m distributed.cli.dask_scheduler --port 0 --protocol tls
     --preload hpcgpu.system.closelog --preload hpcgpu.runner.address_pipe
     --preload hpcgpu.system.warmup --preload hpcgpu.network.schemes --no-dashboard
     --tls-ca-file /j/ca.pem --tls-cert /j/cert.pem --tls-key /j/key.pem'
    >>> argv = scheduler_argv("python3", SchedulerOptions(interface="ib0"), None, "10.78.0.1")
    >>> argv[argv.index("--host") + 1], "--interface" in argv
    ('10.78.0.1', False)
    """
    argv = [python, "-m", "distributed.cli.dask_scheduler", "--port", "0",
            "--protocol", options.protocol, "--preload", "hpcgpu.system.closelog",
            "--preload", "hpcgpu.runner.address_pipe", "--preload", "hpcgpu.system.warmup",
            "--preload", "hpcgpu.network.schemes"]  # unix, ucx+auth where no entry point is
    if host or options.interface:
        argv += ["--host", host] if host else ["--interface", options.interface]
    if options.dashboard_address is None:
        argv.append("--no-dashboard")
    else:
        argv += ["--dashboard-address", options.dashboard_address]
    if tls is not None:
        argv += ["--tls-ca-file", tls.ca_file, "--tls-cert", tls.cert, "--tls-key", tls.key]
    return argv


def _interface_address(options: SchedulerOptions, tls: TLSFiles | None) -> str | None:
    """The interface's IPv4 address where TLS files go with it (None: ``--interface`` works)."""
    if not (options.interface and tls):
        return None
    from distributed.utils import get_ip_interface

    try:
        return get_ip_interface(options.interface)
    except ValueError as error:
        raise ValueError(f"--interface {options.interface}: {error}") from None


def _read_identity(pipe: int, child: Child, timeout: float) -> dict:
    """Read the scheduler's identity from ``pipe`` until it closes; raise if the scheduler
    dies first (``RuntimeError``) or is slow (``TimeoutError``)."""
    deadline, data = time.monotonic() + timeout, b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([pipe], [], [], 0.2)
        chunk = os.read(pipe, 65536) if ready else None
        if chunk:
            data += chunk
            continue
        if chunk == b"" and data:  # closed after writing: complete
            return json.loads(data)
        if chunk == b"" or not child.running():  # closed unwritten: the scheduler is gone
            child.wait(5)
            raise RuntimeError(f"the Dask scheduler exited with code {child.popen.returncode} "
                               "before it listened; its messages are above")
    child.stop(grace=5)
    raise TimeoutError(f"the Dask scheduler did not start listening within {timeout:g} s")


def _can_fork(python: str, options: SchedulerOptions) -> bool:
    """Whether the scheduler may be a fork of this process: the same python, and not UCX
    (whose libraries must not start from a copy of another process's state)."""
    return (os.path.realpath(python) == os.path.realpath(sys.executable)
            and not options.protocol.lower().startswith("ucx"))


def _forked(argv: list[str], env: dict, read: int) -> Child | None:
    """``argv`` (``python -m distributed.cli.dask_scheduler ...``) forked from this
    process, which has imported distributed already; None where it cannot fork."""
    from distributed.cli import dask_scheduler

    def main(args):
        return dask_scheduler.main(args=list(args), prog_name="dask scheduler")

    return fork_child(SCHEDULER_NAME, main, [dask_scheduler.__file__, *argv[3:]], env, close_fds=(read,))


def start_scheduler(python: str, options: SchedulerOptions, tls: TLSFiles | None,
                    env: Mapping[str, str], timeout: float = 120, log=None) -> tuple[Child, dict]:
    """Start the scheduler and wait until it says, over a pipe only it holds, where it listens.

    The scheduler gets ``CUDA_VISIBLE_DEVICES=""``: it never creates a CUDA context on a
    GPU that a worker owns. Returns the child and its identity (``address``, ``services``);
    raises ``RuntimeError`` (with the exit code) if it dies first, ``TimeoutError`` if it is slow.
    """
    read, write = os.pipe()
    try:
        host = _interface_address(options, tls) or (None if options.interface else options.host)
        argv = scheduler_argv(python, options, tls, host)
        env = {**env, "CUDA_VISIBLE_DEVICES": "", address_pipe.ENV: str(write)}
        child = _forked(argv, env, read) if log is None and _can_fork(python, options) else None
        # not -m: a module in the job's (shared) working directory would be imported first
        child = child or start_child("scheduler", module_argv(argv), stdout=log, stderr=log,
                                     pass_fds=(write,), env=env)
        os.close(write)
        write = -1
        info = _read_identity(read, child, timeout)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
    if "://" not in str(info.get("address", "")):
        child.stop(grace=5)
        raise RuntimeError(f"the Dask scheduler reported no address: {info!r}")
    return child, info
