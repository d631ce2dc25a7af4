"""From keyword arguments and configuration to validated parts, before anything starts."""

from __future__ import annotations

import numbers
import os
import sys
from dataclasses import dataclass
from typing import Any

from dask.utils import parse_timedelta

from hpcgpu.system import config
from hpcgpu.jobspec.dialects import Dialect, get_dialect
from hpcgpu.launchers import Launcher, get_launcher
from hpcgpu.system.logdir import default_log_directory, prune_job_logs
from hpcgpu.jobspec.container import container_option
from hpcgpu.jobspec.cpushape import CPUJobShape
from hpcgpu.jobspec.gpukeywords import GPU_KEYWORDS, batch_gpu_options, explicit_none, switch_network
from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.jobspec.keywords import check_keywords
from hpcgpu.jobspec.resources import GPUJobShape, NodeLimits
from hpcgpu.jobspec.scriptfields import check_options
from hpcgpu.jobspec.units import parse_memory
from hpcgpu.schedulers.registry import get_scheduler

__all__ = ["ClusterSetup", "prepare", "make_log_directory", "naming_the_source", "positional_n_workers",
           "SHAPE_OPTIONS", "NETWORK_OPTIONS"]

SHAPE_OPTIONS = ("nodes", "gpus_per_node", "cpus_per_gpu", "memory_per_gpu", "memory_per_node",
                 "walltime", "queue", "account", "job_name", "gpu_type", "exclusive")
#: Options of :class:`hpcgpu.network.NetworkSettings` (``interface`` and ``protocol`` too).
NETWORK_OPTIONS = ("protocol", "transports", "interface", "scheduler_interface", "worker_interface",
                   "net_devices", "client_protocol", "fallback", "ucx_environment")
_LIST_OPTIONS = ("job_extra_directives", "job_directives_skip", "job_script_prologue",
                 "job_script_epilogue", "worker_extra_args")


@dataclass(frozen=True)
class ClusterSetup:
    """Everything a cluster needs, validated."""

    shape: GPUJobShape | CPUJobShape
    dialect: Dialect
    launcher: Launcher | None
    log_directory: str | None
    shared_temp_directory: str
    scheduler_options: dict
    job_options: dict
    network_options: dict
    scheduler_in_job: bool = False
    cpu: bool = False  # dask-jobqueue CPU workers (hpcgpu.cluster.batch.cpu_setup)
    config_name: str | None = None
    #: dask-cuda's worker keywords given (None: none), rendered as the workers' flags
    gpu_options: GPUWorkerOptions | None = None


def prepare(scheduler: str, options: dict[str, Any]) -> ClusterSetup:
    """Resolve ``options`` against the configuration and validate them; no I/O but making
    the log directory (and, for the default one, removing its old job logs).

    Examples
    --------
    >>> setup = prepare("slurm", {"gpus_per_node": 4, "log_directory": "/tmp/hpcgpu-doc"})
    >>> setup.shape.total_gpus, setup.launcher.name, setup.scheduler_options
    (4, 'srun', {'dashboard_address': 'localhost:8787'})
    >>> prepare("slurm", {"gpus_per_nod": 4})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown option(s) gpus_per_nod: known are nodes, gpus_per_node, cpus_per_gpu, ...
    """
    account_key = get_scheduler(scheduler).account_key  # unknown scheduler names fail first
    config.ensure_jobqueue_section(scheduler)  # one dask-jobqueue has no section for
    opts = config.resolve(scheduler, explicit_none(options), account_key=account_key)
    with naming_the_source(scheduler, options):
        check_keywords(opts)  # the configuration's values too: their types and bounds
        check_options(opts)  # arguments, config files and DASK_HPCGPU__* alike, before any mkdir
        gpu_options, switches = batch_gpu_options({k: opts[k] for k in GPU_KEYWORDS if opts[k] is not None})
        limits = _limits(opts["limits"] or {})
        shape = GPUJobShape.create(limits=limits, **{k: opts[k] for k in SHAPE_OPTIONS})
        container = container_option(opts["container"], bool(opts["scheduler_in_job"]))
        opts["protocol"], opts["transports"] = switch_network(opts["protocol"], opts["transports"], switches)
        dialect = get_dialect(scheduler, limits=limits, **(opts["site"] or {}))
        launcher = get_launcher(opts["launcher"] or dialect.launcher_for(shape),
                                one_task_per=opts["one_task_per"])
        dialect.validate(shape)  # first: what this scheduler needs for the shape
        launcher.validate(shape, dialect.multi_node_launchers)
        _check_lists(opts)
        log_directory = make_log_directory(opts["log_directory"])
    scheduler_options = {"dashboard_address": opts["dashboard_address"],
                         **(opts["scheduler_options"] or {})}
    job_options = dict(
        shape=shape, dialect=dialect, launcher=launcher,
        python=opts["python"] or ("python3" if container else sys.executable), log_directory=log_directory,
        death_timeout=opts["death_timeout"], local_directory=opts["local_directory"],
        shebang=opts["shebang"], worker_http_address=opts["worker_http_address"],
        **{name: list(opts[name] or []) for name in _LIST_OPTIONS},
    )
    # dask-cuda's keywords, the workers' image: only when given (else the script stays as it was)
    job_options.update({k: v for k, v in (("gpu_options", gpu_options), ("container", container)) if v})
    return ClusterSetup(
        shape=shape, dialect=dialect, launcher=launcher, log_directory=log_directory,
        shared_temp_directory=opts["shared_temp_directory"] or log_directory,
        scheduler_options=scheduler_options, job_options=job_options,
        network_options={name: opts[name] for name in NETWORK_OPTIONS},
        scheduler_in_job=bool(opts["scheduler_in_job"]), gpu_options=gpu_options,
    )


def naming_the_source(scheduler: str, options: dict[str, Any]):
    """:func:`hpcgpu.system.config.naming_the_source` for a cluster's ``options``: a value
    refused inside says where it came from where the user did not pass it (a profile, ...)."""
    account_key = get_scheduler(scheduler).account_key
    return config.naming_the_source(scheduler, explicit_none(options), account_key)


def make_log_directory(chosen: str | None) -> str:
    """The chosen directory, or the per-user default, whose old job logs are removed.

    A directory that exists keeps its mode: shared ones are fine (job files go into a
    private directory inside, :mod:`hpcgpu.cluster.batch.private`)."""
    directory = os.path.abspath(os.path.expanduser(chosen or default_log_directory()))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as error:  # a name too long, a file in the way, no permission
        raise ValueError(f"log_directory={chosen!r} cannot be made ({error.strerror}): choose "
                         "another log_directory") from None
    if not chosen:
        prune_job_logs(directory, parse_timedelta(config.get("log-retention")))
    return directory


def _check_lists(opts: dict[str, Any]) -> None:
    for name in _LIST_OPTIONS:
        if isinstance(opts[name], str) or not isinstance(opts[name] or [], (list, tuple)):
            raise ValueError(f"{name}={opts[name]!r} must be a list of strings, e.g. [{opts[name]!r}]")


def _limits(values: dict[str, Any]) -> NodeLimits:
    unknown = sorted(set(values) - {"cpus", "gpus", "memory"})
    if unknown:
        raise ValueError(f"limits: unknown key(s) {', '.join(unknown)}: use cpus, gpus, memory")
    memory = values.get("memory")
    return NodeLimits(cpus=values.get("cpus"), gpus=values.get("gpus"),
                      memory=parse_memory(memory, field="limits.memory") if memory else None)


def positional_n_workers(values: dict[str, Any]) -> dict[str, Any]:
    """A cluster's arguments with a first positional one that is not a scheduler's name taken
    as dask-jobqueue's first positional, ``n_workers`` (``SLURMCluster(2, cores=1,
    memory="1GB")``), unless ``n_workers`` came by name too.

    >>> positional_n_workers({"scheduler": 2, "n_workers": 0})
    {'scheduler': None, 'n_workers': 2}
    >>> positional_n_workers({"scheduler": "slurm", "n_workers": 0})
    {'scheduler': 'slurm', 'n_workers': 0}

    Only a whole number is taken so; anything else stays ``scheduler``'s, and its check
    names that field. A number out of bounds names both:

    >>> positional_n_workers({"scheduler": -1, "n_workers": 0})
    Traceback (most recent call last):
    ...
    ValueError: scheduler=-1 is read as n_workers, dask-jobqueue's first positional: n_workers=-1 must be a whole number from 0 to 100000
    """
    first = values.get("scheduler")
    if not isinstance(first, numbers.Integral) or isinstance(first, bool) or values.get("n_workers"):
        return values
    try:
        check_keywords({"n_workers": first})
    except (TypeError, ValueError) as error:
        raise type(error)(f"scheduler={first!r} is read as n_workers, dask-jobqueue's first "
                          f"positional: {error}") from None
    return {**values, "scheduler": None, "n_workers": first}
