"""A UCX cluster's scheduler in a process of its own on this host, the client in over TLS.

With ``protocol="ucx"`` the cluster classes do not start the Dask scheduler in the user's
process: distributed-ucxx (0.52) can corrupt the heap of a process that holds a UCX
scheduler and a client together (rarely: about one start in fifty on a loaded host), and
such a process keeps a core busy polling UCX. So the scheduler runs as
``python -m hpcgpu.cluster.batch.scheduler_process`` (the program ``scheduler_in_job``
starts in a job) with the options the in-process scheduler would get, listening on UCX for
the workers and on TLS (TCP without security) for the user's client, which speaks no UCX.
It gets this process's Dask configuration (``dask.config.set`` included); its scheduler file
and log are in the cluster's private directory; it stops with the cluster, and with this
process however it ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dask.config

from hpcgpu.cluster.start_errors import ProcessStartError
from hpcgpu.cluster.batch.scheduler_job import SchedulerApart, read_listeners, tls_flags
from hpcgpu.network import NetworkSettings, job_environment
from hpcgpu.system.pymain import module_argv

__all__ = ["SchedulerProcess", "own_error", "scheduler_argv", "START_TIMEOUT"]

#: Seconds the scheduler process has to write its listeners.
START_TIMEOUT = 60.0
#: A traceback's exception line: ``pkg.mod.SomeError: message`` (its name in group 1)
_ERROR = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit)\b.*)$")


def scheduler_argv(python: str, scheduler_file: str, options: dict[str, Any],
                   tls: dict[str, str | None]) -> list[str]:
    """The scheduler process's command line: ``options`` are ``Scheduler``'s keywords
    (JSON), ``tls`` its CA, certificate and key files.

    Examples
    --------
    >>> argv = scheduler_argv("py", "/p/s.json", {"protocol": ["ucx", "tls"], "port": [0, 0]},
    ...                       {"tls_ca_file": "/p/ca.pem", "tls_cert": "/p/c.pem", "tls_key": "/p/k.pem"})
    >>> argv[3:]  # doctest: +NORMALIZE_WHITESPACE
    ['hpcgpu.cluster.batch.scheduler_process', '/p/s.json', '--options',
     '{"protocol": ["ucx", "tls"], "port": [0, 0]}', '--tls-ca-file', '/p/ca.pem',
     '--tls-cert', '/p/c.pem', '--tls-key', '/p/k.pem']
    >>> scheduler_argv("py", "/p/s.json", {"idle_timeout": object()}, {})
    Traceback (most recent call last):
    ...
    ValueError: scheduler_options={'idle_timeout': <object ...>} cannot go to the scheduler's own process (protocol='ucx' runs it apart): give numbers, strings, lists and dicts only
    """
    try:
        text = json.dumps(options)
    except (TypeError, ValueError):
        raise ValueError(f"scheduler_options={options!r} cannot go to the scheduler's own process "
                         "(protocol='ucx' runs it apart): give numbers, strings, lists and dicts "
                         "only") from None
    argv = [python, "-m", "hpcgpu.cluster.batch.scheduler_process", scheduler_file,
            "--options", text, *tls_flags(tls)]
    return module_argv(argv)


def _tls_files(security: Any, written: Any) -> dict[str, str | None]:
    """The scheduler's CA, certificate and key files: the user's, or the cluster's temporary
    ones as the workers got them, written to the private directory (``written``: one
    certificate for every role)."""
    if not security:
        return {}
    for tls in (security.get_tls_config_for_role("scheduler"), written.get_tls_config_for_role("worker")):
        if tls.get("cert") and "\n" not in tls["cert"]:
            return {"tls_ca_file": tls.get("ca_file"), "tls_cert": tls["cert"], "tls_key": tls.get("key")}
    return {}


def own_error(lines: list[str]) -> str | None:
    """The exception at the root of the last traceback in ``lines`` (the first of a chain),
    without its module path.

    >>> own_error(["Traceback (most recent call last):", '  File "x.py", line 1',
    ...            "ucxx._lib.libucxx.UCXXNoDeviceError: No such device", "",
    ...            "The above exception was the direct cause of the following exception:", "",
    ...            "Traceback (most recent call last):", "RuntimeError: Scheduler failed to start."])
    'UCXXNoDeviceError: No such device'
    >>> own_error(["all well"]) is None
    True
    """
    found, chained = None, True
    for line in reversed(lines):
        if line.startswith(("The above exception was", "During handling of the above")):
            chained = True
        elif (match := _ERROR.match(line)) and chained:
            found, chained = match.group(1), False
        elif match:  # another traceback, before the last one
            break
    return found


class SchedulerProcess(SchedulerApart):
    """The cluster's scheduler as a child process on this host (SpecCluster's ``scheduler``;
    ``contact_address`` the workers' UCX listener). Closing it waits for the scheduler to
    end (the cluster asked it to), then stops it.

    Parameters
    ----------
    network : NetworkSettings
        The cluster's (``client_protocol`` set: the second listener).
    spec : dict
        SpecCluster's scheduler spec: distributed's ``Scheduler`` (another class cannot go to
        that process) and its keywords, as the in-process scheduler would get them.
    security, written : distributed.Security or None
        The cluster's credentials, and the same as files (the workers').
    private : PrivateDirectory
        Where its scheduler file, listeners, credentials and log go.
    """

    #: its workers' ``last_seen`` times are this host's clock (hpcgpu.cluster.batch.silence)
    same_clock = True

    def __init__(self, network: NetworkSettings, spec: dict[str, Any], security: Any,
                 written: Any, private: Any, timeout: float = START_TIMEOUT) -> None:
        from distributed import Scheduler

        if spec.get("cls", Scheduler) is not Scheduler:
            raise ValueError(f"scheduler_cls={spec['cls']!r} with protocol={network.protocol!r}: a UCX "
                             "cluster's scheduler runs in a process of its own, distributed's Scheduler; "
                             "leave scheduler_cls out, or use protocol='tls'")
        super().__init__()
        self.network, self.private, self.timeout = network, private, timeout
        self.options = {k: v for k, v in spec.get("options", {}).items() if k != "security"}
        self.security, self.written = security, written
        self.child: Any = None

    async def start(self) -> None:
        """Start the process and wait for its listeners; its own error if it ends first."""
        from hpcgpu.runner.processes import start_child

        directory = Path(self.private.path)
        scheduler_file = str(directory / "scheduler.json")
        self.listeners_file, self.log = scheduler_file + ".listeners", directory / "scheduler.log"
        argv = scheduler_argv(sys.executable, scheduler_file,
                              {"dashboard": None, **self.options}, _tls_files(self.security, self.written))
        env = {**os.environ, **dict(job_environment(self.network, "scheduler")), "CUDA_VISIBLE_DEVICES": "",
               # this process's Dask config (dask.config.set included), as the scheduler had it here
               "DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(dask.config.global_config)}
        with open(self.log, "ab") as log:  # the directory is the user's alone (0700)
            self.child = start_child("scheduler", argv, env=env, stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        try:
            addresses = await read_listeners(self.listeners_file, "the scheduler's listeners file",
                                             self.timeout, self.child.running)
            if addresses is None:
                raise self._start_error()
        except BaseException:
            await self._stop(grace=2)
            raise
        await self.listening(addresses)

    def _start_error(self) -> ProcessStartError:
        ended = "ended" if not self.child.running() else f"wrote no listeners within {self.timeout:g} s"
        lines = self.log.read_text(errors="replace").splitlines()[-40:] if self.log.exists() else []
        said = own_error(lines) or "its last lines:\n" + "\n".join(lines[-10:])
        return ProcessStartError(f"{said} (in the scheduler's own process, which {ended})")

    async def _stop(self, grace: float) -> None:
        if self.child is not None:
            await asyncio.to_thread(self.child.stop, grace)

    async def close(self) -> None:
        """Give the scheduler (asked to close by the cluster) 10 s to end, then stop it."""
        if self.child is not None:
            await asyncio.to_thread(self.child.wait, 10)
        await self._stop(grace=5)
        await super().close()
