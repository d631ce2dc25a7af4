"""The Dask scheduler of a batch job: an extra process on the first node that takes no GPU."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from hpcgpu.runner.dashboard import DEFAULT_DASHBOARD
from hpcgpu.runner.processes import Child, start_child
from hpcgpu.runner.security import TLSFiles

__all__ = ["SchedulerOptions", "scheduler_argv", "start_scheduler", "read_scheduler_file"]


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
    """

    protocol: str = "tls"
    interface: str | None = None
    dashboard_address: str | None = DEFAULT_DASHBOARD


def scheduler_argv(python: str, scheduler_file: str, options: SchedulerOptions,
                   tls: TLSFiles | None) -> list[str]:
    """The scheduler's command line (distributed's own ``dask scheduler``).

    Examples
    --------
    >>> argv = scheduler_argv("python3", "/j/s.json", SchedulerOptions(dashboard_address=None),
    ...                       TLSFiles("/j/ca.pem", "/j/cert.pem", "/j/key.pem"))
    >>> " ".join(argv)  # doctest: +NORMALIZE_WHITESPACE
    'python3 -m distributed.cli.dask_scheduler --scheduler-file /j/s.json --port 0
     --protocol tls --preload hpcgpu.system.closelog --no-dashboard --tls-ca-file /j/ca.pem --tls-cert /j/cert.pem --tls-key /j/key.pem'
    """
    argv = [python, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", scheduler_file,
            "--port", "0", "--protocol", options.protocol, "--preload", "hpcgpu.system.closelog"]
    if options.interface:
        argv += ["--interface", options.interface]
    if options.dashboard_address is None:
        argv.append("--no-dashboard")
    else:
        argv += ["--dashboard-address", options.dashboard_address]
    if tls is not None:
        argv += ["--tls-ca-file", tls.ca_file, "--tls-cert", tls.cert, "--tls-key", tls.key]
    return argv


def read_scheduler_file(path: str | os.PathLike) -> dict | None:
    """The scheduler file's content, or None while it is missing or half written."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def start_scheduler(python: str, scheduler_file: str, options: SchedulerOptions,
                    tls: TLSFiles | None, env: Mapping[str, str], timeout: float = 120,
                    log=None) -> tuple[Child, dict]:
    """Start the scheduler and wait for its scheduler file.

    The scheduler gets ``CUDA_VISIBLE_DEVICES=""``: it never creates a CUDA context on a
    GPU that a worker owns. Returns the child and the scheduler file's content; raises
    ``RuntimeError`` (with the exit code) if it dies first, ``TimeoutError`` if it is slow.
    """
    argv = scheduler_argv(python, scheduler_file, options, tls)
    child = start_child("scheduler", argv, env={**env, "CUDA_VISIBLE_DEVICES": ""},
                        stdout=log, stderr=log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_scheduler_file(scheduler_file)
        if info and info.get("address"):
            return child, info
        if not child.running():
            raise RuntimeError(
                f"the Dask scheduler exited with code {child.popen.returncode} before it "
                f"wrote {scheduler_file}; its messages are above"
            )
        time.sleep(0.1)
    child.stop(grace=5)
    raise TimeoutError(f"the Dask scheduler wrote no {scheduler_file} within {timeout:g} s")
