"""``GPUCluster``: dask-jobqueue's ``JobQueueCluster`` that counts GPUs and retires whole jobs."""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from typing import Any, ClassVar

from dask.utils import parse_timedelta
from distributed.core import Status, rpc
from distributed.scheduler import Scheduler
from distributed.security import Security
from distributed.utils import format_dashboard_link
from tornado.ioloop import PeriodicCallback

from hpcgpu.system import config
from hpcgpu.network.tls import cluster_security
from hpcgpu.system.jobqueue import JobQueueCluster
from hpcgpu.cluster.arrays import ArraySettings, JobArrays
from hpcgpu.cluster.adaptive import job_of_worker
from hpcgpu.cluster.cpujob import cpu_job_class
from hpcgpu.cluster.cpusetup import is_cpu_request, prepare_cpu
from hpcgpu.cluster.job import GPUJob
from hpcgpu.cluster.jobs import JobRecord, html_table
from hpcgpu.cluster.jobscheduler import JobScheduler, worker_address
from hpcgpu.cluster.expiry import WalltimeReplacement
from hpcgpu.cluster.faults import cancel_together
from hpcgpu.cluster.lifecycle import SCHEDULER_ANSWER, end_workers, scheduler_gone, watch
from hpcgpu.cluster.monitor import JobMonitor
from hpcgpu.cluster.scaling import JobScaling
from hpcgpu.cluster.poolmixin import ClusterPools, job_options_for, prepare_pools
from hpcgpu.cluster.pools import (DEFAULT_POOL, Pool, name_levels, pool_resources, with_resources,
                                  worker_groups)
from hpcgpu.cluster.network import cluster_network, dashboard_host
from hpcgpu.cluster.private import PrivateDirectory, worker_credentials
from hpcgpu.network import client_address, config_context, job_environment, scheduler_options
from hpcgpu.cluster.schedulerstart import root_cause, start_error
from hpcgpu.cluster.setup import ClusterSetup, prepare
from hpcgpu.jobspec.scriptfields import shell_word

__all__ = ["GPUCluster"]

logger = logging.getLogger("hpcgpu.cluster")


class GPUCluster(ClusterPools, JobScaling, JobMonitor, WalltimeReplacement, JobArrays,
                 JobQueueCluster):
    """Dask on a batch scheduler, one worker per GPU, scaled in GPUs or whole jobs.

    Parameters
    ----------
    scheduler : {"slurm", "pbs", "lsf", "sge"}
        Given by the subclasses (``SLURMCluster``...).
    nodes, gpus_per_node, cpus_per_gpu, memory_per_gpu, memory_per_node, walltime, queue, \
account, job_name, gpu_type, exclusive
        The shape of one job (see :class:`hpcgpu.GPUJobShape`).
    launcher : str
        ``srun``, ``mpirun``, ``mpiexec``, ``jsrun`` or ``direct``; default: the dialect's.
    one_task_per : {"node", "gpu"}
        ``node`` (default): one launcher task per node starts a nanny and worker per GPU;
        ``gpu``: one task per GPU, for sites that bind GPUs to tasks.
    site : dict
        Dialect options, e.g. ``{"gpu_directive": "gres"}``; ``limits``: what a node holds.
    profile : str
        A named site profile from ``hpcgpu.profiles`` in the dask config.
    security : Security, bool or None
        TLS is on by default with temporary certificates; ``False`` turns it off (warned).
    job_extra_directives, job_directives_skip, job_script_prologue, job_script_epilogue, \
shebang, python, interface, protocol, log_directory, local_directory, death_timeout, \
worker_extra_args, scheduler_options, shared_temp_directory
        As in dask-jobqueue.
    cores, processes, memory, job_cpu, job_mem, resource_spec, ncpus, mem, use_stdin, \
lsf_units, project, config_name
        dask-jobqueue's CPU workers, with its meaning and its ``jobqueue.<config_name>``
        configuration: without a GPU request the job is the one dask-jobqueue renders
        (docs/migrating.md). Together with GPU arguments they are refused, naming the
        equivalent.
    max_failed_jobs : int
        Jobs that may end before their workers connect before hpcgpu stops replacing them.
    transports, scheduler_interface, worker_interface, net_devices, client_protocol, \
fallback, ucx_environment
        UCX and per-role network options (:class:`hpcgpu.network.NetworkSettings`;
        docs/networking.md). ``protocol="ucx"`` configures scheduler, workers and client.
    scheduler_in_job : bool
        Run the Dask scheduler inside the first job instead of this process (a login node
        without InfiniBand): workers speak UCX to it, this process reaches it over
        ``client_protocol`` (TLS by default). That job stays while the cluster lives.
    retire_before, lifetime_stagger, replace_ahead : str or float
        Walltime-aware retirement (docs/reliability.md): workers retire gracefully this long
        before the walltime (``"off"``: never), spread over ``2 * lifetime_stagger``; the
        replacement job is submitted ``replace_ahead`` before the first retires.
    signal_before_walltime : str, float or bool
        Ask the scheduler for a warning signal this long before the end (SLURM
        ``--signal=USR1@N``, SGE ``-notify``, LSF ``-wa``): workers drain on it. ``True``: 120 s.
    requeue : bool
        Let the scheduler requeue a preempted job (``--requeue``, ``-r y``).
    job_arrays : bool
        Submit several new jobs at once as ONE array job (default True; docs/arrays.md).
    max_array_size, array_throttle : int
        At most this many elements per array (default: the site's limit, read once), and
        at most this many of an array's elements running at once (default: no limit).
    pools : dict of str to dict
        Named worker pools besides the default one (the cluster's own arguments), each with
        its own job shape: ``{"cpu": dict(gpus_per_node=0, cores_per_node=8,
        memory_per_node="32GB", queue="debug")}``; ``scale(jobs=2, pool="cpu")``
        (docs/pools.md).

    Examples
    --------
    >>> from hpcgpu import SLURMCluster
    >>> SLURMCluster(gpus_per_node=0)
    Traceback (most recent call last):
    ...
    ValueError: gpus_per_node=0 must be a whole number of at least 1 (e.g. gpus_per_node=4)
    """

    job_cls = GPUJob
    scheduler_name: ClassVar[str] = ""

    def __init__(self, scheduler: str | None = None, *, security: Any = None,
                 n_workers: int = 0, asynchronous: bool = False, loop: Any = None,
                 name: str | None = None, silence_logs: str | bool = "error",
                 scheduler_cls: type = Scheduler, max_failed_jobs: int | None = None,
                 poll_interval: str | float | None = None, retire_before: Any = None,
                 lifetime_stagger: Any = None, replace_ahead: Any = None,
                 signal_before_walltime: Any = None, requeue: bool = False,
                 job_arrays: bool | None = None, max_array_size: int | None = None,
                 array_throttle: int | None = None, pools: dict | None = None,
                 **options: Any) -> None:
        # dask-jobqueue's first positional is n_workers: only a name picks the scheduler.
        kind = scheduler if isinstance(scheduler, str) else self.scheduler_name
        if name is not None:  # every worker's --name: unquoted in dask-jobqueue's CPU jobs
            shell_word("name", name)
        self._arrays = ArraySettings.create(job_arrays, max_array_size, array_throttle)
        setup: ClusterSetup = _prepare(kind, options)  # ValueError before anything starts
        retire = (retire_before, lifetime_stagger, replace_ahead, signal_before_walltime, requeue)
        named = prepare_pools(kind, pools, options, retire)
        if named:  # every worker advertises its pool
            setup = with_resources(setup, pool_resources(DEFAULT_POOL, setup))
        self._retirement, job_options = job_options_for(kind, setup, retire)
        self._setup, self._shape, self._dialect = setup, setup.shape, setup.dialect
        self._log_directory = setup.log_directory
        #: Job name of a worker (picklable: the scheduler runs it for adaptive scaling).
        self.job_key = functools.partial(job_of_worker, levels=name_levels(setup))
        self._pool_of: dict[str, str] = {}  # job name -> its pool (default pool: absent)
        self._targets: dict[str, int] = {}
        self._records: dict[str, JobRecord] = {}
        self.failures: list[str] = []
        self.events: list[str] = []
        self._max_failed_jobs = int(max_failed_jobs or config.get("max-failed-jobs"))
        self._poll_interval = parse_timedelta(poll_interval or config.get("poll-interval"))
        self._tail_lines = int(config.get("stderr-tail-lines"))
        security = _security(security)
        # Every job ever submitted, for the cancel at exit, collection or SIGTERM.
        self._submitted: dict[str, GPUJob] = {}
        #: Credentials and job files, for the user's eyes only (hpcgpu.cluster.private).
        self.private_directory = PrivateDirectory.of(self, setup, name or f"{kind}-cluster")
        # Once, before anything starts: UCX missing raises here (or falls back, warned).
        self.network = net = cluster_network(setup.network_options, security, setup.scheduler_in_job)
        super().__init__(
            n_workers=0, job_cls=cpu_job_class(kind) if setup.cpu else GPUJob,
            loop=loop, security=security, asynchronous=asynchronous,
            shared_temp_directory=setup.shared_temp_directory, silence_logs=silence_logs,
            name=name, scheduler_cls=scheduler_cls,
            # The scheduler's own interface: dask-jobqueue's `interface` must not feed it.
            # CPU workers: dask-jobqueue's rule (interface feeds it unless host/interface given).
            scheduler_options=setup.scheduler_options if setup.cpu else {
                **scheduler_options(net), **setup.scheduler_options},
            interface=net.worker_interface,
            # CPU workers: dask-jobqueue's own rule (the given protocol, or tls:// with TLS).
            protocol=setup.network_options["protocol"] if setup.cpu else net.protocol,
            config_name=setup.config_name or kind,
            environment=job_environment(net, "worker"), **job_options,
        )
        self.new_spec.pop("group", None)
        groups = worker_groups(setup)
        if groups:
            self.new_spec["group"] = groups
        self._pools = {DEFAULT_POOL: Pool(DEFAULT_POOL, setup, self._retirement, self.new_spec)}
        self._add_pools(named)
        self._finalizer = watch(self, self._dialect, self._submitted, self.private_directory)
        if n_workers:
            self.scale(n_workers)

    # ------------------------------------------------------------------ lifecycle
    async def _start(self):
        if "hpcgpu-poll" not in self.periodic_callbacks:
            self.periodic_callbacks["hpcgpu-poll"] = PeriodicCallback(
                self._poll, self._poll_interval * 1000
            )
        # UCX reads its configuration once per process, at the first UCX connection.
        with config_context(self.network, "scheduler"):
            try:
                if self._setup.scheduler_in_job and self.scheduler is None:
                    self.scheduler = await JobScheduler(self)
                await super()._start()
            except Exception as error:
                options = dict(scheduler_options=self._setup.scheduler_options,
                               protocol=self.network.protocol,
                               ucx_environment=dict(self.network.ucx_environment))
                raise start_error(error, options) from root_cause(error)
        if self.network.client_protocol and not self._setup.scheduler_in_job:
            addresses = [listener.contact_address for listener in self.scheduler.listeners]
            self.scheduler_comm = rpc(client_address(addresses, self.network),
                                      connection_args=self.security.get_connection_args("client"))

    async def _close(self):
        """Stop the workers through their nannies and let their jobs end by themselves,
        then upstream's close (which cancels what is left, pending jobs included, and stops
        the scheduler): no job is cancelled while its workers close (docs/reliability.md)."""
        if self.status == Status.running and self.scheduler_comm is not None:
            poll = self.periodic_callbacks.pop("hpcgpu-poll", None)
            if poll is not None:
                poll.stop()  # no status polls while closing (nor after the thread pool's end)
            try:
                if scheduler_gone(self):
                    raise ConnectionError("the scheduler has stopped")
                await end_workers(self)
            except Exception as error:  # the scheduler may be gone: cancelling still works
                logger.warning("closing without the scheduler (%s): cancelling the jobs",
                               str(error) or type(error).__name__)
                if scheduler_gone(self):
                    self.shutdown_scheduler = False  # nothing left to stop, nor to reach
                else:  # one that does not answer: no 30 s connect in upstream's terminate
                    self.scheduler_comm.timeout = SCHEDULER_ANSWER
        # Upstream's close scales to 0 through scale(0): the default pool only.
        for pool in getattr(self, "_pools", {}):
            self._targets[pool] = 0
            for job in self._jobs_of(pool):
                del self.worker_spec[job]
        await super()._close()
        self.private_directory.remove()  # the jobs are gone: their credentials go too

    def _get_worker_security(self, security):
        """Write the temporary certificate to files in the private directory (dask-jobqueue
        writes them into ``shared_temp_directory`` itself, readable as the umask allows, and
        leaves them there): job scripts name the files, never carry the key."""
        return worker_credentials(security, lambda: self.private_directory.path)

    @property
    def gpus_per_job(self) -> int:
        """GPUs in one job of the default pool (0 for dask-jobqueue CPU workers)."""
        return 0 if self._setup.cpu else self._shape.total_gpus

    @property
    def workers_per_job(self) -> int:
        """Dask workers in one job of the default pool: one per GPU, or dask-jobqueue's
        ``processes``."""
        return self._shape.workers_per_job

    # ------------------------------------------------------------------ spec -> jobs
    async def _correct_state_internal(self) -> None:
        """Upstream's reconciliation, but a job's workers are retired (by name, so their
        data moves) before the job is cancelled; upstream passes job names as addresses."""
        async with self._lock:
            self._correct_state_waiting = None
            to_close = set(self.workers) - set(self.worker_spec) - self._retiring_jobs()
            if to_close:
                connected = self.connected_by_job()
                names = sorted(n for job in to_close for n in connected.get(job, ()))
                if names and self.scheduler.status == Status.running:
                    await self.scheduler_comm.retire_workers(
                        names=names, close_workers=True, remove=True)
                for job in to_close:
                    if job in self._records:
                        self._records[job].cancelled_by_us = True
                await cancel_together(self._dialect, [self.workers[job] for job in to_close])
                for job in to_close:
                    self.workers.pop(job, None)
            await self._open(set(self.worker_spec) - set(self.workers))

    async def _open(self, names: set[str]) -> None:
        if not names:
            return
        address = worker_address(self.scheduler, self.network)
        jobs = await self._make_jobs(address, list(names))  # several: array elements
        for name in jobs:
            pool = self._job_pool(name)
            self._records[name] = JobRecord(name, pool.workers_per_job,
                                            pool=pool.name if len(self._pools) > 1 else None)
        results = await asyncio.gather(*(_submit(job) for job in jobs.values()),
                                       return_exceptions=True)
        for (name, job), error in zip(jobs.items(), results):
            record = self._records[name]
            if isinstance(error, BaseException):
                record.state, record.ended = "failed", True
                self.worker_spec.pop(name, None)
                self.failures.append(f"submitting job {name} failed: {error}")
                logger.error("submitting job %s failed: %s", name, error)
                continue
            record.job_id, record.state = job.job_id, "pending"
            job._cluster = weakref.ref(self)  # what SpecCluster sets
            self._created.add(job)
            self._submitted[name] = job
            self.workers[name] = job
        # A rejected submission is reported once, above (and in cluster.failures; waiting
        # for workers raises it): raising here reached the event loop as a second traceback.

    @property
    def dashboard_link(self) -> str:
        """The dashboard's address where it listens: ``localhost`` by default (from a
        laptop: ``ssh -L 8787:localhost:8787 <login node>``); upstream names the
        scheduler's address, where the localhost-only dashboard refuses the connection."""
        port = self.scheduler_info.get("services", {}).get("dashboard")
        if port is None:
            return ""
        scheduler_host = self.scheduler_address.split("://")[1].split("/")[0].rsplit(":", 1)[0]
        address = self._setup.scheduler_options.get("dashboard_address")
        return format_dashboard_link(dashboard_host(address, scheduler_host), port)

    def _repr_html_(self, cluster_status=None):
        return super()._repr_html_(cluster_status) + html_table(self.jobs)


async def _submit(job: GPUJob) -> GPUJob:
    await job
    return job


def _prepare(kind: str, options: dict[str, Any]) -> ClusterSetup:
    """GPU workers (hpcgpu's shape) or dask-jobqueue's CPU workers (cpusetup)."""
    if is_cpu_request(kind, options):
        return prepare_cpu(kind, options)
    return prepare(kind, options)


def _security(security: Any) -> Security | None:
    return cluster_security(security, default=True, warn_plain=True, stacklevel=4)
