"""Every keyword of every class, checked for its type and bounds before anything starts.

One table, :data:`KEYWORDS`, says what each keyword of ``SLURMCluster``, ``PBSCluster``,
``LSFCluster``, ``SGECluster``, ``LocalGPUCluster`` and ``GPURunner`` takes (its Python
types, its bounds, its accepted form in words), and :func:`check_keywords` applies it to the
arguments and to the configuration's values alike. A wrong type raises
:class:`KeywordTypeError` naming the field and the accepted form, never a ``TypeError`` or
``AttributeError`` from deep inside; a string that merely looks true is not ``True``. Every
count has an upper bound, so that a constructor never builds 10**30 worker names. The value
checks that follow (units, names, combinations) stay with their values
(:mod:`~hpcgpu.jobspec.resources`, :mod:`~hpcgpu.jobspec.gpuoptions`, :mod:`~hpcgpu.jobspec.units`).

Examples
--------
>>> _ = check_keywords({"nodes": 2, "scheduler_in_job": False, "queue": None})
>>> check_keywords({"scheduler_in_job": "no"})
Traceback (most recent call last):
...
hpcgpu.jobspec.forms.KeywordTypeError: scheduler_in_job='no' is a str: give True or False
>>> check_keywords({"nodes": 10**30})
Traceback (most recent call last):
...
ValueError: nodes=1000000000000000000000000000000 is more than 100000, the most hpcgpu accepts: give a whole number from 1 to 100000
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping

from hpcgpu.jobspec.container import Container
from hpcgpu.jobspec.forms import (DICT, DURATION, DURATION_OFF, FLAG, LISTEN, MAX_GPUS_PER_NODE,
                                  MAX_NODES, MAX_WORKERS, MEMORY, MEMORY_LIMIT, PATH, PROTOCOL, SIZE,
                                  TEXT, TEXT_OR_TEXTS, TEXTS, WALLTIME, Form, KeywordTypeError,
                                  _duration, _logging_level, check_value, count, http_address,
                                  whole_number)

__all__ = ["KEYWORDS", "KeywordTypeError", "MAX_WORKERS", "as_count", "check_keywords", "form_of",
           "http_address", "whole_number"]


def _security_types() -> tuple[type, ...]:
    from distributed.security import Security

    return (bool, Security)


def _loop_types() -> tuple[type, ...]:
    from tornado.ioloop import IOLoop

    return (IOLoop,)


def _exclusion(value: Any) -> Any:
    """``exclude_failed_hosts``: a duration, or a word for "never"."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word == "auto":
        raise ValueError(value)
    return value if word == "never" else _duration(value)


_SHAPE = {
    "nodes": count(1, MAX_NODES), "gpus_per_node": count(0, MAX_GPUS_PER_NODE),
    "cpus_per_gpu": count(1, 4096), "memory_per_gpu": MEMORY, "memory_per_node": MEMORY,
    "walltime": WALLTIME, "queue": TEXT, "account": TEXT, "job_name": TEXT, "gpu_type": TEXT,
    "exclusive": FLAG, "launcher": TEXT, "one_task_per": TEXT,
}
_JOB = {
    "python": TEXT, "death_timeout": DURATION, "local_directory": PATH, "log_directory": PATH,
    "shared_temp_directory": PATH, "shebang": TEXT, "job_extra_directives": TEXTS,
    "job_directives_skip": TEXTS, "job_script_prologue": TEXTS, "job_script_epilogue": TEXTS,
    "worker_extra_args": TEXTS, "scheduler_options": DICT, "dashboard_address": LISTEN,
    "site": DICT, "limits": DICT, "profile": TEXT, "scheduler_in_job": FLAG,
    "container": Form((str, dict, Container), "an image path ('/sw/hpcgpu.sif') or {'image': ..., "
                      "'runtime': 'apptainer', 'binds': [...]}"),
    "worker_http_address": Form((str,), "an address host:port (':9100', '10.1.0.5:0')",
                                parse=http_address),
}
_NETWORK = {
    "interface": TEXT, "protocol": PROTOCOL, "transports": TEXT_OR_TEXTS,
    "scheduler_interface": TEXT, "worker_interface": TEXT, "net_devices": TEXT,
    "client_protocol": PROTOCOL, "fallback": Form((str, bool), "'tcp', 'tls' or True"),
    "ucx_environment": DICT, "host": LISTEN,
}
_GPU = {
    "device_memory_limit": SIZE, "enable_cudf_spill": FLAG, "cudf_spill_stats": count(0, 2),
    "rmm_pool_size": SIZE, "rmm_maximum_pool_size": SIZE, "rmm_managed_memory": FLAG,
    "rmm_async": FLAG, "rmm_allocator_external_lib_list": TEXT_OR_TEXTS,
    "rmm_release_threshold": SIZE, "rmm_log_directory": PATH, "rmm_track_allocations": FLAG,
    "log_spilling": FLAG, "pre_import": TEXT_OR_TEXTS, "enable_tcp_over_ucx": FLAG,
    "enable_infiniband": FLAG, "enable_nvlink": FLAG, "enable_rdmacm": FLAG, "cpu_affinity": FLAG,
}
_CLUSTER = {
    "scheduler": TEXT, "n_workers": count(0, MAX_WORKERS), "asynchronous": FLAG,
    "name": TEXT, "silence_logs": Form((str, bool, int), "a logging level ('error', 40) or False",
                                       parse=_logging_level),
    "scheduler_cls": Form((type,), "a class"), "max_failed_jobs": count(1, 1_000_000),
    "poll_interval": DURATION, "retire_before": DURATION_OFF, "lifetime_stagger": DURATION,
    "replace_ahead": DURATION,
    "signal_before_walltime": Form((int, float, str, bool), "seconds (120), a duration or True",
                                   parse=_duration),
    "requeue": FLAG, "job_arrays": FLAG, "max_array_size": count(2, 10_000_000),
    "array_throttle": count(1, 10_000_000), "pools": DICT,
    "max_queued_jobs": count(1, 10_000_000), "max_running_jobs": count(1, 10_000_000),
    "exclude_failed_hosts": Form((int, float, str, timedelta, bool), "True (the cluster's life), a "
                                 "duration ('30 minutes', 600) or False", parse=_exclusion),
}
#: dask-jobqueue's CPU-worker keywords (:mod:`hpcgpu.cluster.batch.cpu_setup`)
_CPU = {
    "cores": count(1, 1_000_000), "processes": count(1, MAX_WORKERS), "memory": MEMORY,
    "job_cpu": count(1, 1_000_000), "job_mem": MEMORY, "ncpus": count(1, 1_000_000),
    "mem": MEMORY, "resource_spec": TEXT, "project": TEXT, "config_name": TEXT,
    "use_stdin": FLAG, "lsf_units": TEXT, "nanny": FLAG, "worker_command": TEXT,
    "job_extra": TEXTS, "env_extra": TEXTS, "header_skip": TEXTS, "extra": TEXTS,
}
#: ``LocalGPUCluster``'s and ``GPURunner``'s own
_LOCAL = {
    "CUDA_VISIBLE_DEVICES": Form((str, list, tuple), "'0,1' or a list of GPU indices",
                                 items=(str, int)),
    "gpus": Form((list, tuple), "a list of GPU indices or UUIDs", items=(str, int)),
    "threads_per_worker": count(1, 4096), "nthreads": count(1, 4096),
    "memory_limit": MEMORY_LIMIT,
    "worker_class": Form((type, str), "a Worker class or its dotted name"),
    "scheduler_file": PATH, "worker_options": DICT,
}
#: keyword -> what it accepts (the security and loop types are imported lazily)
KEYWORDS: dict[str, Form | str] = {**_SHAPE, **_JOB, **_NETWORK, **_GPU, **_CLUSTER, **_CPU,
                                   **_LOCAL, "security": "security", "loop": "loop"}
_TEXTS = {"security": "a distributed Security, True or False", "loop": "a tornado IOLoop"}


def _form(name: str) -> Form:
    form = KEYWORDS[name]
    if isinstance(form, Form):
        return form
    types = _security_types() if form == "security" else _loop_types()
    return Form(types, _TEXTS[form])


def form_of(name: str) -> Form:
    """The :class:`Form` of keyword ``name`` (``KeyError`` if the table lacks it).

    >>> form_of("security").text
    'a distributed Security, True or False'
    """
    return _form(name)


def check_keywords(values: Mapping[str, Any]) -> dict[str, Any]:
    """Check every keyword of ``values`` that :data:`KEYWORDS` knows (others are refused as
    unknown where they are resolved); None means "not given" and passes. Returns ``values``
    with each count given as the command line's digits made an int: a constructor that
    compared ``"2"`` with a number raised a ``TypeError`` naming no field.

    >>> check_keywords({"n_workers": " 2", "name": "x", "other": "3"})
    {'n_workers': 2, 'name': 'x', 'other': '3'}
    """
    checked = dict(values)
    for name, value in values.items():
        if name in KEYWORDS and value is not None:
            check_value(name, value, _form(name))
            if isinstance(value, str) and _form(name).low is not None:
                checked[name] = as_count(name, value)
    return checked


def as_count(name: str, value: Any) -> int | None:
    """Count keyword ``name`` as the int it stands for: its form takes the command line's
    digits (``"2"``), which a constructor must not compare with numbers as they came.

    >>> as_count("threads_per_worker", " 2"), as_count("n_workers", None)
    (2, None)
    """
    form = _form(name)
    return None if value is None else whole_number(name, value, form.low, form.high)
