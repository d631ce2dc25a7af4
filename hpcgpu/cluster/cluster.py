"""``GPUCluster``: dask-jobqueue's ``JobQueueCluster`` that counts GPUs and retires whole jobs."""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any, ClassVar

from dask.utils import parse_timedelta
from distributed.core import Status, rpc
from distributed.deploy.spec import SpecCluster
from distributed.objects import SchedulerInfo
from distributed.scheduler import Scheduler
from distributed.utils import NoOpAwaitable

from hpcgpu import config
from hpcgpu.cluster import scaling
from hpcgpu.cluster._jobqueue import JobQueueCluster
from hpcgpu.cluster.arrays import ArraySettings, JobArrays
from hpcgpu.cluster.cpujob import cpu_job_class
from hpcgpu.cluster.fleet import JobFleet
from hpcgpu.cluster.job import GPUJob
from hpcgpu.cluster.jobs import JobTable, format_table, html_table
from hpcgpu.cluster.jobscheduler import JobScheduler, worker_address
from hpcgpu.cluster.lifecycle import end_workers, watch
from hpcgpu.cluster.monitor import JobMonitor
from hpcgpu.cluster.network import (cluster_network, cluster_security, dashboard_link,
                                    jobqueue_options)
from hpcgpu.cluster.pool_setup import named_pool, prepare_cluster
from hpcgpu.cluster.pools import DEFAULT_POOL, Pool, worker_groups
from hpcgpu.cluster.progress import wait_for_workers
from hpcgpu.cluster.submitter import JobSubmitter
from hpcgpu.cluster.walltime_planner import WalltimePlanner
from hpcgpu.network import client_address, config_context
from hpcgpu.scriptfields import shell_word
from tornado.ioloop import PeriodicCallback

__all__ = ["GPUCluster"]

logger = logging.getLogger("hpcgpu.cluster")


class GPUCluster(JobQueueCluster):
    """Dask on a batch scheduler, one worker per GPU, scaled in GPUs or whole jobs.

    dask-jobqueue's ``JobQueueCluster`` (a ``SpecCluster``) holding its parts: ``fleet``
    (pools, their jobs' spec entries and records, arrays), ``monitor`` (job states, ends,
    failures), ``walltime`` (replacement before the walltime); :mod:`.scaling` turns
    requests into whole jobs. The methods below delegate to them.

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
        arrays = ArraySettings.create(job_arrays, max_array_size, array_throttle)
        retire = (retire_before, lifetime_stagger, replace_ahead, signal_before_walltime, requeue)
        # ValueError before anything starts
        setup, named, retirement, job_options = prepare_cluster(kind, options, pools, retire)
        self._setup, self._shape, self._dialect = setup, setup.shape, setup.dialect
        self._log_directory = setup.log_directory
        self._hold_parts(arrays, poll_interval, max_failed_jobs)
        security = cluster_security(security)
        # Once, before anything starts: UCX missing raises here (or falls back, warned).
        self.network = net = cluster_network(setup.network_options, security, setup.scheduler_in_job)
        super().__init__(
            n_workers=0, job_cls=cpu_job_class(kind) if setup.cpu else GPUJob,
            loop=loop, security=security, asynchronous=asynchronous,
            shared_temp_directory=setup.shared_temp_directory, silence_logs=silence_logs,
            name=name, scheduler_cls=scheduler_cls, config_name=setup.config_name or kind,
            **jobqueue_options(setup, net), **job_options,
        )
        # The fleet's desired and started jobs are the dicts SpecCluster reconciles.
        self.fleet.spec, self.fleet.jobs = self.worker_spec, self.workers
        self.new_spec.pop("group", None)
        if worker_groups(setup):
            self.new_spec["group"] = worker_groups(setup)
        self.fleet.add_pool(Pool(DEFAULT_POOL, setup, retirement, self.new_spec))
        for prepared in named:
            self.fleet.add_pool(named_pool(prepared, kind, self._job_kwargs))
        #: Job name of a worker (picklable: the scheduler runs it for adaptive scaling).
        self.job_key = self.fleet.key_jobs(self._name)
        self._finalizer = watch(self, self._dialect, self.fleet.submitted)
        if n_workers:
            self.scale(n_workers)

    def _hold_parts(self, arrays: ArraySettings, poll_interval: Any, max_failed: Any) -> None:
        """The parts: fleet (pools, jobs, records), monitor, walltime planner, submitter."""
        dialect = self._dialect
        self.fleet = JobFleet(self._new_worker_name, arrays=JobArrays(arrays, dialect))
        self.monitor = JobMonitor(
            self.fleet, dialect, connected=self.connected_by_job,
            poll_interval=parse_timedelta(poll_interval or config.get("poll-interval")),
            tail_lines=int(config.get("stderr-tail-lines")),
            max_failed_jobs=int(max_failed or config.get("max-failed-jobs")),
            running=lambda: self.status == Status.running, reconcile=self._reconcile_soon,
            give_up=self._stop_adaptive)
        self.walltime = WalltimePlanner(self.fleet, self.monitor.events)
        self.submitter = JobSubmitter(
            self.fleet, self.monitor, dialect, connected=self.connected_by_job,
            address=lambda: worker_address(self.scheduler, self.network),
            retire=self._retire_workers, adopt=self._adopt)

    # ------------------------------------------------------------------ lifecycle
    async def _start(self):
        if "hpcgpu-poll" not in self.periodic_callbacks:
            self.periodic_callbacks["hpcgpu-poll"] = PeriodicCallback(
                self._poll, self.monitor.poll_interval * 1000
            )
        # UCX reads its configuration once per process, at the first UCX connection.
        with config_context(self.network, "scheduler"):
            if self._setup.scheduler_in_job and self.scheduler is None:
                self.scheduler = await JobScheduler(self)
            await super()._start()
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
                await end_workers(self)
            except Exception as error:  # the scheduler may be gone: cancelling still works
                logger.warning("stopping the workers before close: %r", error)
        if hasattr(self, "fleet"):  # upstream's close scales to 0 through scale(0): one pool
            self.fleet.clear()
        await super()._close()

    def _get_worker_security(self, security):
        """Keep the temporary certificate in memory: dask-jobqueue writes it into
        ``shared_temp_directory``, where it outlives a killed client (GPUJob passes it on)."""
        return security

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
        data moves) before the job is cancelled (:class:`JobSubmitter`)."""
        async with self._lock:
            self._correct_state_waiting = None
            await self.submitter.correct(running=self.status == Status.running)

    async def _retire_workers(self, names: list[str]) -> None:
        if self.scheduler.status == Status.running:
            await self.scheduler_comm.retire_workers(names=names, close_workers=True,
                                                     remove=True)

    def _adopt(self, job: Any) -> None:
        job._cluster = weakref.ref(self)  # what SpecCluster does with its workers
        self._created.add(job)

    def _reconcile_soon(self) -> None:
        self.loop.add_callback(self._correct_state)

    def _stop_adaptive(self) -> None:
        if getattr(self, "_adaptive", None) is not None:
            self._adaptive.stop(reason="jobs-failed-to-start")

    async def _poll(self) -> None:
        """Job states (:class:`JobMonitor`), then replacements of jobs near their walltime."""
        if self.status != Status.running or not await self.monitor.poll():
            return
        if self.status == Status.running and self.walltime.replace_due(time.monotonic()):
            self._reconcile_soon()

    # ------------------------------------------------------------------ scaling
    def scale(self, n: int | None = None, jobs: int = 0, memory: Any = None,
              cores: Any = None, *, gpus: int | None = None, pool: str | None = None):
        """Scale to ``n`` workers (``gpus`` GPU workers), ``jobs`` jobs, or enough jobs for
        ``cores`` cores and ``memory`` bytes, as dask-jobqueue: whole jobs, rounded up,
        the largest of the counts asked for.

        ``pool``: the pool to scale (default: the default pool, the cluster's own
        arguments); the other pools keep their jobs.
        """
        the_pool = self.fleet.pool(pool)
        jobs = scaling.jobs_to_scale(the_pool, n, jobs, memory, cores, gpus)
        if the_pool.name == DEFAULT_POOL:  # the scheduler's job counts as the first one
            jobs = max(jobs - int(self._setup.scheduler_in_job), 0)
        self.fleet.scale_to(jobs, the_pool.name, self.connected_by_job, lambda: self.status
                            not in (Status.closing, Status.closed) and self.monitor.may_submit())
        self._reconcile_soon()
        if self.asynchronous:
            return NoOpAwaitable()

    def new_worker_spec(self, pool: str = DEFAULT_POOL) -> dict:
        """The next job's spec entry (:meth:`JobFleet.new_entry`)."""
        return self.fleet.new_entry(pool)

    async def retire_jobs(self, jobs: list[str]) -> None:
        """Retire every worker of ``jobs`` (their data moves first), then cancel the jobs."""
        self.fleet.retire(jobs)
        await self._correct_state()

    async def scale_down(self, workers):
        """Remove the jobs of ``workers`` (worker or job names): always whole jobs."""
        await self.retire_jobs(sorted({w if w in self.worker_spec else self.job_key(w)
                                       for w in workers}))

    def adapt(self, *, minimum_gpus: int | None = None, maximum_gpus: int | None = None,
              minimum_jobs: int | None = None, maximum_jobs: int | None = None,
              minimum: int | None = None, maximum: int | None = None,
              minimum_cores: Any = None, maximum_cores: Any = None,
              minimum_memory: Any = None, maximum_memory: Any = None,
              pools: dict[str, dict] | None = None, **kwargs: Any):
        """Scale between a minimum and maximum number of workers (GPUs), jobs, cores or
        memory with the load. Counts are whole jobs: minimums round up, maximums down.

        In a cluster with pools, the bounds above are the default pool's, and ``pools``
        gives other pools theirs (the same names: ``{"cpu": dict(maximum_jobs=2)}``);
        each adapted pool grows from the tasks only its workers can run, pools not named
        keep the jobs ``scale`` gave them (:mod:`hpcgpu.cluster.pooladapt`).
        """
        bounds = dict(minimum_gpus=minimum_gpus, maximum_gpus=maximum_gpus,
                      minimum_jobs=minimum_jobs, maximum_jobs=maximum_jobs, minimum=minimum,
                      maximum=maximum, minimum_cores=minimum_cores, maximum_cores=maximum_cores,
                      minimum_memory=minimum_memory, maximum_memory=maximum_memory)
        Adaptive, options = scaling.adaptive(self.fleet.pools, bounds, pools)
        return SpecCluster.adapt(self, Adaptive=Adaptive, job_key=self.job_key,
                                 **options, **kwargs)

    # ------------------------------------------------------------------ pools and jobs
    @property
    def pools(self) -> dict[str, Pool]:
        """The pools by name (``default``: the cluster's own arguments), each a frozen
        :class:`~hpcgpu.cluster.pools.Pool`."""
        return dict(self.fleet.pools)

    def job_script(self, pool: str | None = None) -> str:
        """The script one job of ``pool`` (default: the default pool) submits, with a
        placeholder worker name."""
        if self.fleet.pool(pool).spec is self.new_spec:
            return self._dummy_job.job_script()
        return self.fleet.job_script(pool)

    @property
    def jobs(self) -> JobTable:
        """Every job this cluster submitted, as last polled (oldest first): a tuple of
        :class:`JobInfo` that shows itself as a table (text, HTML, rich)."""
        return self.fleet.table()

    def job_table(self) -> str:
        """:attr:`jobs` as a plain-text table."""
        return format_table(self.jobs)

    @property
    def failures(self) -> list[str]:
        """Reports of jobs that ended before their workers connected."""
        return self.monitor.failures

    @property
    def events(self) -> list[str]:
        """What happened to running jobs: walltime replacements, unexpected ends."""
        return self.monitor.events

    def connected_by_job(self) -> dict[str, set[str]]:
        """Job name -> names of its workers connected to the scheduler now."""
        out: dict[str, set[str]] = {}
        for info in self.scheduler_info.get("workers", {}).values():
            out.setdefault(self.job_key(info["name"]), set()).add(str(info["name"]))
        return out

    def _update_worker_status(self, op, msg):
        super()._update_worker_status(op, msg)
        self.fleet.refresh(self.connected_by_job())

    def wait_for_workers(self, n_workers: int | None = None, timeout: float | None = None,
                         *, gpus: int | None = None, pool: str | None = None) -> None:
        """Block until ``n_workers`` (or ``gpus``) GPU workers are connected, showing job states.
        With pools, every pool's workers count, or only those of ``pool``.

        Raises ``RuntimeError`` with the failure reports when jobs end before their workers
        connect and no more will be submitted, and ``TimeoutError`` with the job table.
        """
        wanted = gpus if gpus is not None else n_workers
        if not isinstance(wanted, int) or wanted < 1:
            raise ValueError(f"n_workers={wanted!r} must be a whole number of at least 1")
        if pool is not None:
            self.fleet.pool(pool)  # a ValueError names the pools
        return self.sync(self._wait_for_gpus, wanted, timeout, pool)

    async def _wait_for_gpus(self, wanted: int, timeout: float | None,
                             pool: str | None = None) -> None:
        async def workers() -> dict:
            self.scheduler_info = SchedulerInfo(await self.scheduler_comm.identity())
            self.fleet.refresh(self.connected_by_job())
            return self.scheduler_info["workers"]

        await wait_for_workers(wanted, timeout, workers=workers, fleet=self.fleet,
                               failures=self.failures, pool=pool)

    @property
    def dashboard_link(self) -> str:
        """The dashboard's address where it listens: ``localhost`` by default (from a
        laptop: ``ssh -L 8787:localhost:8787 <login node>``)."""
        return dashboard_link(self.scheduler_info, self.scheduler_address,
                              self._setup.scheduler_options.get("dashboard_address"))

    def _repr_html_(self, cluster_status=None):
        return super()._repr_html_(cluster_status) + html_table(self.jobs)
