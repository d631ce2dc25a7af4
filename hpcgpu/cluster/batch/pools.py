"""Several worker pools in one cluster: named job shapes behind one scheduler and one spec.

A cluster's own arguments are its ``default`` pool; ``pools={"cpu": {...}, "big": {...}}``
adds named ones. Each pool is validated before anything starts, into its own frozen
:class:`Pool` (a :class:`~hpcgpu.cluster.batch.setup.ClusterSetup`, its walltime plan, its spec
entry); every job of ``worker_spec`` belongs to one pool, named ``<cluster>-<pool>-<n>``.

Resources, so that ``dask.annotate(resources=...)`` places tasks (docs/pools.md): GPU
workers advertise ``GPU=1``, CPU-pool workers ``CPU=<threads>``, and with ``pools=`` every
worker advertises its pool as ``pool-<name>=1``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import dask.config

from hpcgpu.cluster.batch.cpu_setup import CPU_ONLY, GPU_ONLY, prepare_cpu
from hpcgpu.cluster.batch.job_kinds import JobKind, kind_of
from hpcgpu.cluster.batch.job_caps import CAP_FIELDS
from hpcgpu.cluster.batch.setup import SHAPE_OPTIONS, ClusterSetup, prepare
from hpcgpu.jobspec.walltime import Retirement
from hpcgpu.schedulers.registry import get_scheduler

__all__ = ["DEFAULT_POOL", "POOL_OPTIONS", "Pool", "PoolJobKey", "name_levels", "pool_options",
           "pool_resources", "prepare_pool", "with_resources", "worker_groups"]

DEFAULT_POOL = "default"
#: What a pool may set; the rest comes from the cluster's arguments.
POOL_OPTIONS = (*SHAPE_OPTIONS, "cores_per_node", "processes", "site", "limits", "launcher",
                "one_task_per", "job_extra_directives", "job_directives_skip",
                "job_script_prologue", "job_script_epilogue", "worker_extra_args",
                "max_queued_jobs", "max_running_jobs")
#: The cluster's job shape, which a pool does not inherit (queue, account, walltime it does).
_SHAPE = ("nodes", "gpus_per_node", "cpus_per_gpu", "memory_per_gpu", "memory_per_node",
          "gpu_type", "exclusive", "job_name")
#: The cluster's own, never a pool's.
_CLUSTER_ONLY = ("scheduler_in_job", "scheduler_options", "dashboard_address")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Pool:
    """One pool: its validated setup, its walltime plan, and the spec entry of its jobs.

    ``spec`` is the ``{"cls", "options", "group"}`` entry every job of the pool shares in
    ``worker_spec`` (by identity: job arrays group entries of one spec).
    """

    name: str
    setup: ClusterSetup
    retirement: Retirement | None = None
    spec: dict = dataclasses.field(default_factory=dict, compare=False)

    @property
    def cpu(self) -> bool:
        """CPU workers (dask-jobqueue's job), no GPUs."""
        return self.setup.cpu

    @property
    def kind(self) -> JobKind:
        """GPU jobs or dask-jobqueue's CPU jobs (:mod:`hpcgpu.cluster.batch.job_kinds`)."""
        return kind_of(self.setup.shape)

    @property
    def shape(self) -> Any:
        return self.setup.shape

    @property
    def workers_per_job(self) -> int:
        return self.setup.shape.workers_per_job

    @property
    def name_levels(self) -> int:
        """``-<i>`` parts a worker's name adds to its job's name."""
        return name_levels(self.setup)


def name_levels(setup: ClusterSetup) -> int:
    """``-<i>`` parts a worker's name adds to its job's name: ``-<node>-<gpu>`` for GPU
    jobs, dask-jobqueue's own for CPU jobs."""
    return kind_of(setup.shape).name_levels(setup.shape)


def worker_groups(setup: ClusterSetup) -> list[str]:
    """The name suffixes of one job's workers (SpecCluster's ``group``)."""
    return kind_of(setup.shape).worker_groups(setup.shape)


def pool_options(name: Any, pool: Any, cluster_options: dict[str, Any]) -> tuple[bool, dict]:
    """``(cpu, options)``: what to prepare for pool ``name``: the cluster's arguments but
    its job shape, then the pool's. A CPU pool (``gpus_per_node=0``) takes
    ``cores_per_node``, ``memory_per_node`` and ``processes`` (default 1: one
    multi-threaded worker per node), dask-jobqueue's ``cores``, ``memory``, ``processes``.

    Examples
    --------
    >>> cpu, opts = pool_options("cpu", dict(gpus_per_node=0, cores_per_node=4,
    ...     memory_per_node="8GB", queue="debug"), {"gpus_per_node": 4, "account": "p1"})
    >>> cpu, sorted(opts.items())
    (True, [('account', 'p1'), ('cores', 4), ('job_name', 'hpcgpu-cpu'), ('memory', '8GB'), \
('processes', 1), ('queue', 'debug')])
    >>> pool_options("cpu", dict(gpus_per_node=0, cores_per_node=4), {})
    Traceback (most recent call last):
    ...
    ValueError: pools['cpu']: a CPU pool (gpus_per_node=0) needs cores_per_node= and \
memory_per_node=, e.g. dict(gpus_per_node=0, cores_per_node=8, memory_per_node='32GB')
    >>> pool_options("big", dict(gpus=4), {})
    Traceback (most recent call last):
    ...
    ValueError: pools['big']: unknown option(s) gpus: a pool takes nodes, gpus_per_node, \
cpus_per_gpu, memory_per_gpu, memory_per_node, walltime, queue, account, job_name, gpu_type, \
exclusive, cores_per_node, processes, site, limits, launcher, one_task_per, \
job_extra_directives, job_directives_skip, job_script_prologue, job_script_epilogue, \
worker_extra_args, max_queued_jobs, max_running_jobs
    """
    if not isinstance(name, str) or not _NAME.match(name) or name == DEFAULT_POOL:
        raise ValueError(f"pools: {name!r} is not a pool name: use a word of letters, digits "
                         f"and _ that starts with a letter and is not {DEFAULT_POOL!r} "
                         "(e.g. pools={'cpu': {...}})")
    where = f"pools[{name!r}]"
    if not isinstance(pool, dict):
        raise ValueError(f"{where}={pool!r} must be a dict of job options, e.g. "
                         "dict(gpus_per_node=4, queue='gpu')")
    unknown = [k for k in pool if k not in POOL_OPTIONS]
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}: a pool takes "
                         f"{', '.join(POOL_OPTIONS)}")
    inherited = {k: v for k, v in cluster_options.items()
                 if k not in _SHAPE and k not in CPU_ONLY and k not in _CLUSTER_ONLY}
    # the pool's caps are the submitter's (hpcgpu.cluster.batch.admission), not its job's
    own = {k: v for k, v in pool.items() if v is not None and k not in CAP_FIELDS}
    own.setdefault("job_name", f"hpcgpu-{name}")
    if own.get("gpus_per_node") != 0:
        if "cores_per_node" in own or "processes" in own:
            raise ValueError(f"{where}: cores_per_node and processes are for a CPU pool: add "
                             "gpus_per_node=0, or give GPU pools cpus_per_gpu")
        return False, {**inherited, **own}
    return True, _cpu_options(where, own, inherited)


def _cpu_options(where: str, own: dict, inherited: dict) -> dict:
    """A CPU pool's options in dask-jobqueue's words."""
    del own["gpus_per_node"]
    gpu = [k for k in own if k in _SHAPE and k not in ("memory_per_node", "job_name")]
    gpu += [k for k in own if k in GPU_ONLY and k not in _SHAPE]
    if gpu:
        raise ValueError(f"{where}: {gpu[0]}= is for GPU pools: a CPU pool (gpus_per_node=0) "
                         "takes cores_per_node, memory_per_node, processes")
    if "cores_per_node" not in own or "memory_per_node" not in own:
        raise ValueError(f"{where}: a CPU pool (gpus_per_node=0) needs cores_per_node= and "
                         "memory_per_node=, e.g. dict(gpus_per_node=0, cores_per_node=8, "
                         "memory_per_node='32GB')")
    own["cores"] = own.pop("cores_per_node")
    own["memory"] = own.pop("memory_per_node")
    own.setdefault("processes", 1)
    kept = {k: v for k, v in inherited.items() if k not in GPU_ONLY}
    return {**kept, **own}


def prepare_pool(kind: str, name: str, pool: Any, cluster_options: dict[str, Any]) -> ClusterSetup:
    """The validated setup of pool ``name`` (its errors name the pool); no I/O but mkdir."""
    cpu, options = pool_options(name, pool, cluster_options)
    account_key = get_scheduler(kind).account_key  # dask-jobqueue's word there
    if cpu and account_key != "account" and "account" in options:
        options[account_key] = options.pop("account")
    try:
        setup = prepare_cpu(kind, options) if cpu else prepare(kind, options)
    except ValueError as error:
        raise ValueError(f"pools[{name!r}]: {error}") from None
    return with_resources(setup, pool_resources(name, setup))


def pool_resources(name: str, setup: ClusterSetup) -> str:
    """The ``--resources`` the workers of pool ``name`` add (GPU workers have ``GPU=1``).

    >>> from hpcgpu.cluster.batch.cpu_setup import prepare_cpu
    >>> pool_resources("cpu", prepare_cpu("slurm", dict(cores=8, memory="8GB", processes=2)))
    'CPU=4,pool-cpu=1'
    """
    own = f"pool-{name}=1"
    return f"CPU={setup.shape.worker_process_threads},{own}" if setup.cpu else own


def with_resources(setup: ClusterSetup, resources: str) -> ClusterSetup:
    """``setup`` whose workers also get ``--resources resources`` (comma-separated: the
    dask-jobqueue command line is not quoted)."""
    options = dict(setup.job_options)
    extra = options.get("worker_extra_args")
    if extra is None and setup.cpu:  # what dask-jobqueue would read itself
        extra = dask.config.get(f"jobqueue.{setup.config_name}.worker-extra-args", None)
    options["worker_extra_args"] = [*(extra or ()), "--resources", resources]
    return dataclasses.replace(setup, job_options=options)


@dataclass(frozen=True)
class PoolJobKey:
    """The job of a worker, in a cluster with pools (picklable: adapt runs it on the
    scheduler). ``prefixes``: ``(job-name prefix, levels)`` of the named pools.

    >>> key = PoolJobKey((("C-cpu-", 0), ("C-big-", 2)), 2)
    >>> key("C-cpu-4"), key("C-big-5-0-1"), key("C-3-1-0")
    ('C-cpu-4', 'C-big-5', 'C-3')
    """

    prefixes: tuple[tuple[str, int], ...]
    default_levels: int

    def __call__(self, worker: Any) -> str:
        name = str(getattr(worker, "name", worker))
        levels = next((n for prefix, n in self.prefixes if name.startswith(prefix)),
                      self.default_levels)
        return name.rsplit("-", levels)[0] if levels else name
