"""``scheduler_in_job``: the Dask scheduler runs inside the cluster's first job.

For sites whose login node has no InfiniBand (or no UCX): the first job's script starts
the scheduler (:mod:`hpcgpu.cluster.batch.scheduler_process`) on its first node (in the background, without a GPU), listening on
UCX for the workers and on TCP/TLS for the client, then starts that job's workers, which
read the scheduler file in the log directory. The cluster object waits for the listeners
file and connects to the client listener; the other jobs' workers get the UCX address.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from typing import Any

from distributed.deploy.spec import ProcessInterface

from hpcgpu.network import NetworkSettings, client_address, job_environment, scheduler_options
from hpcgpu.system.pymain import module_argv
from hpcgpu.system.schedfile import read_trusted_json

__all__ = ["JobScheduler", "SchedulerApart", "read_listeners", "scheduler_lines", "tls_flags", "worker_address", "START_TIMEOUT"]

#: Seconds the cluster waits for the scheduler job to start (queue wait included).
START_TIMEOUT = 300.0


def worker_address(scheduler: Any, net: NetworkSettings) -> str:
    """The scheduler address workers use: the listener speaking the workers' protocol."""
    contact = getattr(scheduler, "contact_address", None)
    listeners = getattr(scheduler, "listeners", None)
    if listeners and net.client_protocol:
        return client_address([l.contact_address for l in listeners],
                              NetworkSettings(protocol=net.protocol))
    return contact or scheduler.address


def tls_flags(tls: dict[str, str | None]) -> list[str]:
    """``scheduler_process``'s flags for the CA, certificate and key files given.

    >>> tls_flags({"tls_cert": "/p/c.pem", "tls_key": None})
    ['--tls-cert', '/p/c.pem']
    """
    flags = (("tls_ca_file", "--tls-ca-file"), ("tls_cert", "--tls-cert"), ("tls_key", "--tls-key"))
    return [part for key, flag in flags if tls.get(key) for part in (flag, str(tls[key]))]


def scheduler_lines(python: str, scheduler_file: str, net: NetworkSettings,
                    tls: dict[str, str | None]) -> tuple[str, ...]:
    """Shell lines: start the scheduler in the background (its role's UCX settings, no
    GPU), and, last, wait for it once the workers' launcher returns.

    Examples
    --------
    >>> lines = scheduler_lines("py", "/l/c.json", NetworkSettings.create(
    ...     "ucx", interface="ib0", client_protocol="tcp"), {})
    >>> print(lines[0])  # doctest: +NORMALIZE_WHITESPACE
    rm -f /l/c.json /l/c.json.listeners
    >>> from hpcgpu.system.pymain import SAFE_MAIN  # python -m, without the cwd on sys.path
    >>> print(lines[1].replace(shlex.quote(SAFE_MAIN), "SAFE_MAIN"))  # doctest: +NORMALIZE_WHITESPACE
    env -u DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT UCXPY_PROGRESS_MODE=thread
    UCXPY_ENABLE_PYTHON_FUTURE=1 CUDA_VISIBLE_DEVICES=
    py -c SAFE_MAIN hpcgpu.cluster.batch.scheduler_process /l/c.json --protocol ucx,tcp --interface ib0,ib0 &
    >>> lines[-1]
    'wait "$HPCGPU_SCHEDULER_PID"'
    """
    options = scheduler_options(net)
    protocol, interface = options["protocol"], options["interface"]
    join = lambda v: ",".join(map(str, v)) if isinstance(v, list) else str(v)  # noqa: E731
    worker_env = dict(job_environment(net, "worker"))
    own = dict(job_environment(net, "scheduler"))
    env = ["env"]
    for name in worker_env:
        if name not in own:
            env += ["-u", name]
    env += [f"{k}={v}" for k, v in own.items()] + ["CUDA_VISIBLE_DEVICES="]
    argv = [python, "-m", "hpcgpu.cluster.batch.scheduler_process", scheduler_file,
            "--protocol", join(protocol)]
    if interface:
        argv += ["--interface", join(interface)]
    argv += tls_flags(tls)
    return (
        f"rm -f {shlex.quote(scheduler_file)} {shlex.quote(scheduler_file + '.listeners')}",
        shlex.join(env + module_argv(argv)) + " &",  # the job's directory: maybe shared
        'HPCGPU_SCHEDULER_PID=$!',
        'wait "$HPCGPU_SCHEDULER_PID"',
    )


async def read_listeners(path: str, what: str, timeout: float,
                         alive: Any = lambda: True) -> list[str] | None:
    """The addresses a scheduler apart wrote to its listeners file ``path`` within ``timeout``
    s while ``alive()``; None if none came. Only the scheduler's own file (0600) in the
    private directory counts, no other user's (#38)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        found = read_trusted_json(path, what, private=True)
        if found and found.get("addresses"):
            return found["addresses"]
        await asyncio.sleep(0.1)
    return None


class SchedulerApart(ProcessInterface):
    """A scheduler outside this process: ``address`` (and ``external_address``) is the
    client's listener, ``contact_address`` the workers' (the first)."""

    network: NetworkSettings

    async def listening(self, addresses: list[str]) -> None:
        """Started: it listens at ``addresses``."""
        self.contact_address = addresses[0]
        self.address = self.external_address = client_address(addresses, self.network)
        await super().start()


class JobScheduler(SchedulerApart):
    """The cluster's scheduler, as the first job: SpecCluster's ``scheduler``; a job of
    ``job_cls`` with the cluster's job ``options``, recorded in ``submitted``; its
    scheduler file in the cluster's ``private`` directory
    (:class:`~hpcgpu.cluster.batch.private.PrivateDirectory`).

    ``address`` (and ``external_address``) is the client's listener, ``contact_address``
    the workers'. Closing it cancels the job.
    """

    def __init__(self, job_cls: type, options: dict[str, Any], cluster_name: str,
                 network: NetworkSettings, submitted: dict[str, Any], private: Any,
                 timeout: float | None = None) -> None:
        super().__init__()
        self.network = network
        options = dict(options)  # the cluster's job options
        self.log_directory = options.get("log_directory") or os.getcwd()
        name = f"{cluster_name}-scheduler"
        # Private: another user who could swap it would send the workers elsewhere.
        self.scheduler_file = str(private.path / f"{name}.json")
        self.listeners_file = self.scheduler_file + ".listeners"
        self.timeout = float(timeout or START_TIMEOUT)
        self.job = job_cls(None, name=name, scheduler_file=self.scheduler_file, **options)
        submitted[name] = self.job  # cancelled at exit too (hpcgpu.cluster.shutdown)
        self.job.scheduler_lines = scheduler_lines(
            options.get("python") or "python3", self.scheduler_file, self.network,
            self.job.security_files)

    async def start(self) -> None:
        """Submit the job and wait for its scheduler's listeners (cancel it on failure)."""
        for path in (self.scheduler_file, self.listeners_file):
            if os.path.exists(path):
                os.unlink(path)  # a stale file would point at a dead scheduler
        await self.job.start()
        try:
            addresses = await read_listeners(self.listeners_file, "the scheduler job's listeners file",
                                             self.timeout)
            if addresses is None:
                raise TimeoutError(
                    f"the scheduler job {self.job.job_id} wrote no {self.listeners_file} within "
                    f"{self.timeout:g} s: see its output in {self.log_directory} "
                    "(queue wait counts too: raise death_timeout, or check the queue)")
        except BaseException:
            await self.job.close()
            raise
        await self.listening(addresses)

    async def close(self) -> None:
        """Cancel the scheduler's job."""
        await self.job.close()
        await super().close()
