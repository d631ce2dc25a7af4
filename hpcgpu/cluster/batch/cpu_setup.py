"""dask-jobqueue's CPU-worker arguments: which request is a CPU one, and its validated parts.

A cluster asks for CPU workers, exactly as dask-jobqueue would, when it is given one of
dask-jobqueue's own job arguments (``cores``, ``memory``, ``processes``, ``job_cpu``...;
``gpus_per_node=0`` may go with them), or when nothing asks for GPUs and the user's ``jobqueue.<config_name>``
section sets ``cores``. GPU arguments together with CPU-only ones are refused with the
equivalents to use (docs/migrating.md).
"""

from __future__ import annotations

import re
from typing import Any

import dask.config

from hpcgpu.system import config
from hpcgpu.cluster.batch.cpu_job import cpu_job_class
from hpcgpu.cluster.batch.setup import NETWORK_OPTIONS, ClusterSetup, make_log_directory, prepare
from hpcgpu.jobspec.cpushape import CPUJobShape
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.gpukeywords import GPU_KEYWORDS
from hpcgpu.jobspec.keywords import check_keywords
from hpcgpu.worker.http import http_argv
from hpcgpu.jobspec.scriptfields import CPU_WORDS, check_options, quoted_value
from hpcgpu.jobspec.units import parse_walltime
from hpcgpu.schedulers.registry import get_scheduler

__all__ = ["is_cpu_request", "prepare_any", "prepare_cpu", "CPU_ONLY", "GPU_ONLY"]

#: dask-jobqueue's job arguments that have no GPU meaning, and what to use with GPUs.
CPU_ONLY = {
    "cores": "cpus_per_gpu (cores of each GPU worker)",
    "memory": "memory_per_node or memory_per_gpu",
    "processes": "gpus_per_node (one worker per GPU)",
    "job_cpu": "cpus_per_gpu", "job_mem": "memory_per_node", "ncpus": "cpus_per_gpu",
    "mem": "memory_per_node", "resource_spec": "job_extra_directives",
    "project": "account", "config_name": "hpcgpu.<scheduler> config or profile=",
    "use_stdin": None, "lsf_units": None, "nanny": None, "worker_command": None,
    "job_extra": "job_extra_directives", "env_extra": "job_script_prologue",
    "header_skip": "job_directives_skip", "extra": "worker_extra_args",
}
#: hpcgpu's GPU and multi-node arguments, which dask-jobqueue's CPU jobs do not take.
GPU_ONLY = ("nodes", "gpus_per_node", "cpus_per_gpu", "memory_per_gpu", "memory_per_node",
            "gpu_type", "exclusive", "launcher", "one_task_per", "profile", "site", "limits",
            "scheduler_in_job", "container",
            *[n for n in NETWORK_OPTIONS if n not in ("interface", "protocol")],
            *GPU_KEYWORDS)
#: dask-jobqueue's options that reach its job script unquoted -> their jobqueue.* key.
_SCRIPT_FIELDS = {"job_name": "name", "queue": "queue", "project": "project",
                  "account": "account", "walltime": "walltime", "resource_spec": "resource-spec",
                  "log_directory": "log-directory", "shebang": "shebang",
                  "local_directory": "local-directory", "interface": "interface",
                  "shared_temp_directory": "shared-temp-directory",
                  "death_timeout": "death-timeout"}
_PLACEHOLDER = "tcp://<insert-scheduler-address-here>:8786"


def is_cpu_request(scheduler: str, options: dict[str, Any]) -> bool:
    """True when ``options`` (and the configuration) ask for dask-jobqueue CPU workers.

    Examples
    --------
    >>> is_cpu_request("slurm", {"cores": 8, "memory": "28GB"})
    True
    >>> is_cpu_request("slurm", {"gpus_per_node": 4})
    False
    >>> is_cpu_request("slurm", {"processes": 4, "gpus_per_node": 4})
    Traceback (most recent call last):
    ...
    ValueError: processes=4 is dask-jobqueue's CPU-worker option but gpus_per_node=4 asks for \
GPU workers (one per GPU): with GPUs use gpus_per_node (one worker per GPU) instead of \
processes, or drop gpus_per_node for CPU workers as in dask-jobqueue (docs/migrating.md)
    """
    given = {k: v for k, v in options.items() if v is not None}
    cpu = [k for k in given if k in CPU_ONLY]
    if cpu and given.get("gpus_per_node") == 0:  # no GPUs, dask-jobqueue's CPU job
        del given["gpus_per_node"]
    gpu = [k for k in given if k in GPU_ONLY]
    if cpu and gpu:
        first, other = cpu[0], gpu[0]
        use = CPU_ONLY[first]
        instead = f"use {use} instead of {first}" if use else f"{first} is not used"
        raise ValueError(
            f"{first}={given[first]!r} is dask-jobqueue's CPU-worker option but "
            f"{other}={given[other]!r} asks for GPU workers (one per GPU): with GPUs {instead}, "
            f"or drop {other} for CPU workers as in dask-jobqueue (docs/migrating.md)"
        )
    if cpu or gpu:
        return bool(cpu)
    mine = dask.config.get(f"hpcgpu.{scheduler}", {}) or {}
    if any(k.replace("-", "_") in GPU_ONLY and v is not None for k, v in mine.items()):
        return False
    return dask.config.get(f"jobqueue.{scheduler}.cores", None) is not None


def prepare_any(scheduler: str, options: dict[str, Any]) -> ClusterSetup:
    """GPU workers (hpcgpu's shape, :func:`~hpcgpu.cluster.batch.setup.prepare`) or
    dask-jobqueue's CPU workers (:func:`prepare_cpu`)."""
    if is_cpu_request(scheduler, options):
        return prepare_cpu(scheduler, options)
    return prepare(scheduler, options)


def prepare_cpu(scheduler: str, options: dict[str, Any]) -> ClusterSetup:
    """Validate a CPU request through dask-jobqueue's own job class; no I/O but mkdir.

    Examples
    --------
    >>> setup = prepare_cpu("slurm", {"cores": 8, "processes": 4, "memory": "28GB"})
    >>> setup.shape.worker_process_threads, setup.shape.worker_process_memory, setup.cpu
    (2, '6.52GiB', True)
    """
    options = {k: v for k, v in options.items() if v is not None}
    check_keywords(options)  # a pool's options too
    if options.get("gpus_per_node") == 0:
        del options["gpus_per_node"]
    config_name = options.pop("config_name", None) or scheduler
    section = f"jobqueue.{config_name}"
    _check_cpu_arguments(scheduler, options, section)
    _http_on_loopback(options, section)
    interface = options.pop("interface", None) or dask.config.get(f"{section}.interface", None)
    protocol = options.pop("protocol", None)
    scheduler_options = {
        "dashboard_address": config.get("defaults.dashboard-address") or "localhost:8787",
        **(options.pop("scheduler_options", None)
           or dask.config.get(f"{section}.scheduler-options", None) or {}),
    }
    shared = (options.pop("shared_temp_directory", None)
              or dask.config.get(f"{section}.shared-temp-directory", None))
    # As for GPU jobs: the chosen log directory or hpcgpu's per-user one, never the working
    # directory (dask-jobqueue's jobs without one write slurm-<id>.out there).
    logs = make_log_directory(options.get("log_directory")
                              or dask.config.get(f"{section}.log-directory", None))
    options["log_directory"] = logs
    shared = shared or logs  # the credentials' private directory goes inside
    dialect = get_dialect(scheduler)
    probe = _probe_job(scheduler, dialect, config_name, options)
    walltime = options.get("walltime") or dask.config.get(f"{section}.walltime", None)
    shape = CPUJobShape(cores=int(probe.worker_cores), processes=int(probe.worker_processes),
                        memory=int(probe.worker_memory), job_name=probe.job_name,
                        walltime=_seconds(walltime, scheduler))
    return ClusterSetup(
        shape=shape, dialect=dialect, launcher=None, log_directory=probe.log_directory,
        shared_temp_directory=shared, scheduler_options=scheduler_options,
        job_options=dict(options, dialect=dialect),
        network_options={"interface": interface, "protocol": protocol},
        cpu=True, config_name=config_name,
    )


def _check_cpu_arguments(scheduler: str, options: dict[str, Any], section: str) -> None:
    """GPU-only and scheduler arguments refused; the script fields checked, from the
    arguments or the ``section`` of jobqueue's configuration."""
    for name in GPU_ONLY:
        if name in options:
            raise ValueError(f"{name}= is for GPU workers: CPU workers take dask-jobqueue's "
                             "cores=, memory=, processes= (docs/migrating.md)")
    if options.get("retire_before") not in (None, "off"):
        raise ValueError("retire_before applies to GPU workers: for CPU workers use "
                         "worker_extra_args=['--lifetime', '55m'] as in dask-jobqueue")
    _refuse_scheduler_arguments(scheduler, options)
    quoted = {name: quoted_value for name in get_dialect(scheduler).quoted_directives}
    check_options({name: options[name] if options.get(name) is not None
                   else dask.config.get(f"{section}.{key}", None)
                   for name, key in _SCRIPT_FIELDS.items()}, {**CPU_WORDS, **quoted})


def _probe_job(scheduler: str, dialect: Any, config_name: str, options: dict[str, Any]) -> Any:
    """dask-jobqueue's job for these options (its ValueErrors are the user's)."""
    try:
        return cpu_job_class(scheduler)(_PLACEHOLDER, name="dummy-name", dialect=dialect,
                                        config_name=config_name, **options)
    except KeyError as error:  # dask-jobqueue reads jobqueue.<config_name> unchecked
        sections = ", ".join(sorted(dask.config.get("jobqueue", {}) or {}))
        raise ValueError(f"config_name={config_name!r}: the dask config has no "
                         f"jobqueue.{config_name} section ({error}): use one of {sections}") from None
    except TypeError as error:
        match = re.search(r"(unexpected keyword argument.+)", str(error))
        if not match:
            raise
        # dask-jobqueue's own words, then what hpcgpu adds.
        raise ValueError(
            f"Got {match.group(1)}. Very likely this unexpected parameter was passed in "
            f'"job_kwargs" in the {scheduler.upper()}Cluster constructor:\n'
            f"job_kwargs={options}\n(CPU workers take dask-jobqueue's arguments; GPU ones: "
            "docs/migrating.md)"
        ) from None


def _http_on_loopback(options: dict[str, Any], section: str) -> None:
    """dask-jobqueue's workers too: their HTTP server (``/metrics``) on loopback unless
    ``worker_http_address`` (or a ``--dashboard-address`` of the user's) says otherwise."""
    extra = options.get("worker_extra_args")
    if extra is None:
        extra = dask.config.get(f"{section}.worker-extra-args", None) or []
    given = options.pop("worker_http_address", None) or config.get("defaults.worker-http-address")
    options["worker_extra_args"] = [*http_argv(given, tuple(extra)), *extra]


def _refuse_scheduler_arguments(scheduler: str, options: dict[str, Any]) -> None:
    """dask-jobqueue's rule: ``host`` and ``dashboard_address`` go in ``scheduler_options``."""
    for name in ("host", "dashboard_address"):
        if name in options:
            raise ValueError(
                f"Please pass {name!r} through 'scheduler_options': use\n"
                f"cluster = {scheduler.upper()}Cluster(..., scheduler_options="
                f"{{{name!r}: {options[name]!r}}}) rather than\n"
                f"cluster = {scheduler.upper()}Cluster(..., {name}={options[name]!r})"
            )


def _seconds(walltime: Any, scheduler: str) -> int | None:
    """Seconds of a walltime as the scheduler reads it (``None`` where it cannot be read).

    >>> _seconds("01:30", "lsf"), _seconds("01:30", "slurm"), _seconds("soon", "sge")
    (5400, 90, None)
    """
    text = str(walltime).strip()
    if get_scheduler(scheduler).walltime_hours_minutes and re.fullmatch(r"\d+:\d+", text):
        hours, minutes = text.split(":")
        return int(hours) * 3600 + int(minutes) * 60
    try:
        return parse_walltime(walltime) if walltime is not None else None
    except ValueError:
        return None
