"""``GPUCluster``: dask-jobqueue's ``JobQueueCluster`` that counts GPUs and retires whole jobs."""

from __future__ import annotations

from typing import Any, ClassVar

from distributed.core import Status
from distributed.deploy.spec import SpecCluster
from distributed.scheduler import Scheduler
from distributed.utils import NoOpAwaitable

from hpcgpu.cluster.batch import scaling
from hpcgpu.cluster.batch.admission import cluster_caps
from hpcgpu.cluster.batch.arrays import ArraySettings
from hpcgpu.cluster.batch.exclusions import exclusion_policy
from hpcgpu.cluster.batch.base import BatchCluster
from hpcgpu.cluster.batch.cpu_job import upstream_job_class
from hpcgpu.cluster.batch.job import GPUJob
from hpcgpu.cluster.batch.job_kinds import kind_of
from hpcgpu.cluster.batch.network import cluster_network, dashboard_link, jobqueue_options
from hpcgpu.cluster.batch.pool_setup import named_pool, prepare_cluster
from hpcgpu.cluster.batch.pools import DEFAULT_POOL, Pool, worker_groups
from hpcgpu.cluster.batch.private import PrivateDirectory
from hpcgpu.cluster.batch.scheduler_apart import SchedulerProcess
from hpcgpu.cluster.batch.scheduler_job import JobScheduler, worker_address
from hpcgpu.cluster.batch.setup import positional_n_workers
from hpcgpu.cluster.start_errors import root_cause, start_error
from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.jobspec.keywords import check_keywords
from hpcgpu.jobspec.scriptfields import shell_template
from hpcgpu.network import config_context
from hpcgpu.network.tls import cluster_security

__all__ = ["GPUCluster"]


class GPUCluster(BatchCluster):
    """Dask on a batch scheduler, one worker per GPU, scaled in GPUs or whole jobs.

    dask-jobqueue's ``JobQueueCluster`` holding its jobs as parts (``fleet``, ``monitor``,
    ``walltime``, ``submitter``: :class:`~hpcgpu.cluster.batch.base.BatchCluster`); this class
    adds the job shape, the network and the pools, and scales in GPUs
    (:mod:`hpcgpu.cluster.batch.scaling`).

    Parameters
    ----------
    scheduler : {"slurm", "pbs", "lsf", "sge", "flux"}
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
    exclude_failed_hosts : bool, str or float
        A host where a worker failed the network check gets no new job (``--exclude``...):
        ``True`` (default; config ``hpcgpu.exclude-failed-hosts``) for the cluster's life, a
        duration for that long, ``False`` never (docs/reliability.md).
    worker_http_address : str
        Where each worker's HTTP server (``/health``, ``/metrics``, no password) listens:
        ``127.0.0.1`` by default (config ``hpcgpu.defaults.worker-http-address``); a site that
        scrapes the workers gives ``":9100"`` or ``"<address>:0"`` (docs/security.md).
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
        Let the scheduler requeue a preempted job (``--requeue``, ``-r y``): a requeued job
        keeps its place and its workers start again when it runs. Without it, a job the
        scheduler requeues anyway (SLURM's default after a node failure) is cancelled and
        replaced at once (docs/reliability.md).
    job_arrays : bool
        Submit several new jobs at once as ONE array job (default True; docs/arrays.md).
    max_array_size, array_throttle : int
        At most this many elements per array (default: the site's limit, read once), and
        at most this many of an array's elements running at once (default: no limit).
    max_queued_jobs, max_running_jobs : int
        At most this many of the cluster's jobs waiting in the queue, and running at once
        (default: no cap; config ``hpcgpu.max-queued-jobs``...; a site profile's values are
        ceilings). ``scale`` and ``adapt`` submit the rest as jobs start or end; a pool of
        ``pools=`` may have its own (docs/pools.md).
    device_memory_limit, enable_cudf_spill, cudf_spill_stats, rmm_pool_size, \
rmm_maximum_pool_size, rmm_managed_memory, rmm_async, rmm_allocator_external_lib_list, \
rmm_release_threshold, rmm_log_directory, rmm_track_allocations, log_spilling, pre_import, \
enable_tcp_over_ucx, enable_infiniband, enable_nvlink, enable_rdmacm, cpu_affinity
        Each GPU worker's options, as ``LocalCUDACluster``'s and with dask-cuda's meanings
        (:class:`~hpcgpu.jobspec.gpuoptions.GPUWorkerOptions`), also from the configuration
        (``hpcgpu.<scheduler>.rmm-pool-size``...): checked before anything is submitted and
        rendered as the worker command's flags (those of ``hpcgpu worker``). The ``enable_*``
        switches choose the network's UCX ``transports`` (a switch on means
        ``protocol="ucx"``). GPU pools inherit them.
    pools : dict of str to dict
        Named worker pools besides the default one (the cluster's own arguments), each with
        its own job shape: ``{"cpu": dict(gpus_per_node=0, cores_per_node=8,
        memory_per_node="32GB", queue="debug")}``; ``scale(jobs=2, pool="cpu")``
        (docs/pools.md).

    Every keyword is checked for its type and bounds before anything starts
    (:mod:`hpcgpu.jobspec.keywords`): the error names the field and the accepted form.

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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """``XCluster.job_cls``: dask-jobqueue's job class of its scheduler, as in
        dask-jobqueue (``GPUJob`` where it has none), so a class line names its scheduler once."""
        super().__init_subclass__(**kwargs)
        if "scheduler_name" in vars(cls) and "job_cls" not in vars(cls):
            cls.job_cls = upstream_job_class(cls.scheduler_name) or cls.job_cls

    def __init__(self, scheduler: str | None = None, *, security: Any = None,
                 n_workers: int = 0, asynchronous: bool = False, loop: Any = None,
                 name: str | None = None, silence_logs: str | bool = "error",
                 scheduler_cls: type = Scheduler, max_failed_jobs: int | None = None,
                 poll_interval: str | float | None = None, retire_before: Any = None,
                 lifetime_stagger: Any = None, replace_ahead: Any = None,
                 signal_before_walltime: Any = None, requeue: bool = False,
                 job_arrays: bool | None = None, max_array_size: int | None = None,
                 array_throttle: int | None = None, pools: dict | None = None,
                 max_queued_jobs: int | None = None, max_running_jobs: int | None = None,
                 exclude_failed_hosts: Any = None, **options: Any) -> None:
        # Every keyword's type and bounds first: nothing is made or submitted on bad input.
        given = check_keywords(positional_n_workers({k: v for k, v in locals().items() if k not in ("self", "options", "__class__")}))
        options = check_keywords(options)  # counts as numbers where "2" came
        kind = given["scheduler"] or self.scheduler_name  # a name; dask-jobqueue's first positional is n_workers
        if name is not None:  # every worker's --name: unquoted in dask-jobqueue's CPU jobs
            shell_template("name", name)
        arrays = ArraySettings.create(job_arrays, given["max_array_size"], given["array_throttle"])
        retire = (retire_before, lifetime_stagger, replace_ahead, signal_before_walltime, requeue)
        # ValueError before anything starts
        setup, named, retirement, job_options = prepare_cluster(kind, options, pools, retire)
        caps = cluster_caps(kind, dict(max_queued_jobs=given["max_queued_jobs"],
                                       max_running_jobs=given["max_running_jobs"]), options.get("profile"), pools)
        self._setup, self._shape, self._log_directory = setup, setup.shape, setup.log_directory
        security = cluster_security(security, default=True, warn_plain=True, stacklevel=3)
        # Once, before anything starts: UCX missing raises here (or falls back, warned).
        net = cluster_network(setup.network_options, security, setup.scheduler_in_job, setup.scheduler_options)
        super().__init__(
            job_dialect=setup.dialect, network=net, arrays=arrays, poll_interval=poll_interval,
            max_failed_jobs=max_failed_jobs, reach_back=not setup.scheduler_in_job, requeue=requeue,
            private_directory=PrivateDirectory.of(self, setup, name or f"{kind}-cluster"),
            n_workers=0, job_cls=kind_of(setup.shape).job_class(kind),
            loop=loop, security=security, asynchronous=asynchronous,
            shared_temp_directory=setup.shared_temp_directory, silence_logs=silence_logs,
            name=name, scheduler_cls=scheduler_cls, config_name=setup.config_name or kind,
            **jobqueue_options(setup, net), **job_options,
        )
        self.new_spec.pop("group", None)
        if groups := worker_groups(setup):
            self.new_spec["group"] = groups
        self.fleet.add_pool(Pool(DEFAULT_POOL, setup, retirement, self.new_spec))
        for prepared in named:
            self.fleet.add_pool(named_pool(prepared, kind, self._job_kwargs))
        self.submitter.gate.caps = caps  # how many jobs may wait and run (admission.py)
        self.fleet.exclusions.policy = exclusion_policy(given["exclude_failed_hosts"])
        #: Job name of a worker (picklable: the scheduler runs it for adaptive scaling).
        self.job_key = self.fleet.key_jobs(self._name)
        if given["n_workers"]:
            self.scale(given["n_workers"])

    async def _start(self):
        # UCX reads its configuration once per process, at the first UCX connection.
        with config_context(self.network, "scheduler"):
            try:
                if self._setup.scheduler_in_job and self.scheduler is None:
                    self.scheduler = await JobScheduler(
                        self.job_cls, self._job_kwargs, self._name, self.network,
                        self.fleet.submitted, self.private_directory)
                elif self.network.client_protocol and not self._setup.cpu and self.scheduler is None:
                    self.scheduler = await SchedulerProcess(  # UCX: not in the user's process
                        self.network, self.scheduler_spec, self.security,
                        self._job_kwargs["security"], self.private_directory)
                await super()._start()
            except Exception as error:
                options = dict(scheduler_options=self._setup.scheduler_options, protocol=self.network.protocol,
                               ucx_environment=dict(self.network.ucx_environment))
                raise start_error(error, options) from root_cause(error)

    @property
    def gpu_options(self) -> GPUWorkerOptions:
        """The default pool's GPU worker options (dask-cuda's keywords; the defaults where
        none was given)."""
        return self._setup.gpu_options or GPUWorkerOptions()

    @property
    def gpus_per_job(self) -> int:
        """GPUs in one job of the default pool (0 for dask-jobqueue CPU workers)."""
        return kind_of(self._shape).gpus(self._shape)

    @property
    def workers_per_job(self) -> int:
        """Dask workers in one job of the default pool: one per GPU, or dask-jobqueue's
        ``processes``."""
        return self._shape.workers_per_job

    # ------------------------------------------------------------------ scaling
    def scale(self, n: int | None = None, jobs: int = 0, memory: Any = None,
              cores: Any = None, *, gpus: int | None = None, pool: str | None = None):
        """Scale to ``n`` workers (``gpus`` GPU workers), ``jobs`` jobs, or enough jobs for
        ``cores`` cores and ``memory`` bytes, as dask-jobqueue: whole jobs, rounded up,
        the largest of the counts asked for.

        ``pool``: the pool to scale (default: the default pool, the cluster's own
        arguments); the other pools keep their jobs.
        """
        if not self.fleet.pools:
            return None  # the scheduler failed to start within __init__: no job to scale
        the_pool = self.fleet.pool(pool)
        jobs = scaling.jobs_to_scale(the_pool, n, jobs, memory, cores, gpus)
        if the_pool.name == DEFAULT_POOL:  # the scheduler's job counts as the first one
            jobs = max(jobs - int(self._setup.scheduler_in_job), 0)
        self.fleet.scale_to(jobs, the_pool.name, self.connected_by_job, lambda: self.status
                            not in (Status.closing, Status.closed) and self.monitor.may_submit())
        self._reconcile_soon()
        if self.asynchronous:
            return NoOpAwaitable()

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
        keep the jobs ``scale`` gave them (:mod:`hpcgpu.cluster.batch.pool_adaptive`).
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
        :class:`~hpcgpu.cluster.batch.pools.Pool`."""
        return dict(self.fleet.pools)

    def job_script(self, pool: str | None = None) -> str:
        """The script one job of ``pool`` (default: the default pool) submits, with a
        placeholder worker name."""
        if self.fleet.pool(pool).spec is self.new_spec:
            return self._dummy_job.job_script()
        # The scheduler's address, as dask-jobqueue's _dummy_job shows for the default pool.
        return self.fleet.job_script(pool, self.scheduler and worker_address(self.scheduler, self.network))

    @property
    def dashboard_link(self) -> str:
        """The dashboard's address where it listens: ``localhost`` by default (from a
        laptop: ``ssh -L 8787:localhost:8787 <login node>``)."""
        return dashboard_link(self.scheduler_info, self.scheduler_address,
                              self._setup.scheduler_options.get("dashboard_address"))
