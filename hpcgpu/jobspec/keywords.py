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
>>> check_keywords({"nodes": 2, "scheduler_in_job": False, "queue": None})
>>> check_keywords({"scheduler_in_job": "no"})
Traceback (most recent call last):
...
hpcgpu.jobspec.keywords.KeywordTypeError: scheduler_in_job='no' is a str: give True or False
>>> check_keywords({"nodes": 10**30})
Traceback (most recent call last):
...
ValueError: nodes=1000000000000000000000000000000 is more than 100000, the most hpcgpu accepts: give a whole number from 1 to 100000
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping

__all__ = ["Form", "KEYWORDS", "KeywordTypeError", "http_address", "MAX_TEXT", "MAX_NODES", "MAX_GPUS_PER_NODE",
           "MAX_WORKERS", "check_keywords", "check_value", "whole_number"]

#: the longest text any keyword takes (Linux's PATH_MAX): longer is a mistake, not a path
MAX_TEXT = 4096
#: more nodes than the largest machines have (about 11,000 in 2025)
MAX_NODES = 100_000
#: more GPUs than any node has (8 today; room for chiplets and MIG slices)
MAX_GPUS_PER_NODE = 128
#: more workers than one Dask scheduler takes, in one job and in one cluster
MAX_WORKERS = 100_000


class KeywordTypeError(TypeError, ValueError):
    """A keyword of the wrong type: a ``TypeError``, and a ``ValueError`` as every other
    refusal of the constructors (callers that catch ``ValueError`` keep working)."""


@dataclass(frozen=True)
class Form:
    """What one keyword accepts.

    Attributes
    ----------
    types : tuple of type
        The Python types taken (``bool`` is not an ``int`` here unless listed).
    text : str
        The accepted form, in the words of the error message.
    low, high : int or None
        Bounds of a count (a whole number, or a string of digits).
    items : tuple of type or None
        The types of a list's items or a dict's values.
    parse : callable or None
        Reads a value of the right type; its ``ValueError``/``TypeError``/``KeyError`` means
        the value is not of the form.
    """

    types: tuple[type, ...]
    text: str
    low: int | None = None
    high: int | None = None
    items: tuple[type, ...] | None = None
    parse: Callable[[Any], Any] | None = None


def count(low: int, high: int) -> Form:
    """A whole number from ``low`` to ``high`` (a string of digits too: the command line's).

    >>> count(1, 8).text
    'a whole number from 1 to 8'
    """
    return Form((int, str), f"a whole number from {low} to {high}", low, high)


def _duration(value: Any) -> Any:
    """Seconds of a duration as dask reads it; the words ``off`` and ``auto`` pass."""
    if isinstance(value, str) and value.strip().lower() in ("off", "auto", "false", "none"):
        return value
    from dask.utils import parse_timedelta

    return parse_timedelta(value, default="seconds")


_HTTP_ADDRESS = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])?:\d{1,5}")


def http_address(value: Any) -> str:
    """``value`` if it is a listen address ``[host]:port`` (``":9100"``, ``"10.1.0.5:0"``,
    ``"[::1]:0"``): it goes unquoted into dask-jobqueue's worker command, so nothing else.

    >>> http_address(":9100")
    ':9100'
    >>> http_address("0.0.0.0:1 ; id")
    Traceback (most recent call last):
    ...
    ValueError: '0.0.0.0:1 ; id' is not host:port
    """
    if not isinstance(value, str) or not _HTTP_ADDRESS.fullmatch(value):
        raise ValueError(f"{value!r} is not host:port")
    return value


FLAG = Form((bool,), "True or False")
TEXT = Form((str,), "a string")
PATH = Form((str, os.PathLike), "a path (a string)")
DURATION = Form((int, float, str, timedelta), "seconds (90) or a duration ('5 minutes', '90s')",
                parse=_duration)
#: a duration, or off (retirement)
DURATION_OFF = Form((int, float, str, timedelta, bool), "a duration ('5 minutes', '90s'), 'off' "
                    "or False", parse=_duration)
WALLTIME = Form((int, float, str, timedelta), "minutes (90) or 'HH:MM:SS' ('01:00:00')")
MEMORY = Form((int, str), "bytes (60000000000) or a size with a unit ('60GB', '60GiB')")
SIZE = Form((int, float, str), "bytes (40000000000), a size ('40GB') or a fraction (0.9)")
TEXTS = Form((list, tuple), "a list of strings (['a', 'b'])", items=(str,))
TEXT_OR_TEXTS = Form((str, list, tuple), "a string ('a,b') or a list of strings (['a', 'b'])",
                     items=(str,))
DICT = Form((dict,), "a dict")


def _security_types() -> tuple[type, ...]:
    from distributed.security import Security

    return (bool, Security)


def _loop_types() -> tuple[type, ...]:
    from tornado.ioloop import IOLoop

    return (IOLoop,)


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
    "worker_extra_args": TEXTS, "scheduler_options": DICT, "dashboard_address": TEXT,
    "site": DICT, "limits": DICT, "profile": TEXT, "scheduler_in_job": FLAG,
    "worker_http_address": Form((str,), "an address host:port (':9100', '10.1.0.5:0')",
                                parse=http_address),
}
_NETWORK = {
    "interface": TEXT, "protocol": TEXT, "transports": TEXT_OR_TEXTS,
    "scheduler_interface": TEXT, "worker_interface": TEXT, "net_devices": TEXT,
    "client_protocol": TEXT, "fallback": Form((str, bool), "'tcp', 'tls' or True"),
    "ucx_environment": DICT, "host": TEXT,
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
    "name": TEXT, "silence_logs": Form((str, bool, int), "a logging level ('error') or False"),
    "scheduler_cls": Form((type,), "a class"), "max_failed_jobs": count(1, 1_000_000),
    "poll_interval": DURATION, "retire_before": DURATION_OFF, "lifetime_stagger": DURATION,
    "replace_ahead": DURATION,
    "signal_before_walltime": Form((int, float, str, bool), "seconds (120), a duration or True"),
    "requeue": FLAG, "job_arrays": FLAG, "max_array_size": count(2, 10_000_000),
    "array_throttle": count(1, 10_000_000), "pools": DICT,
}
#: dask-jobqueue's CPU-worker keywords (:mod:`hpcgpu.cluster.cpu_setup`)
_CPU = {
    "cores": count(1, 1_000_000), "processes": count(1, MAX_WORKERS), "memory": MEMORY,
    "job_cpu": count(1, 1_000_000), "job_mem": MEMORY, "ncpus": count(1, 1_000_000),
    "mem": MEMORY, "resource_spec": TEXT, "project": TEXT, "config_name": TEXT,
    "use_stdin": FLAG, "lsf_units": TEXT, "nanny": FLAG, "worker_command": TEXT,
    "job_extra": TEXTS, "env_extra": TEXTS, "header_skip": TEXTS, "extra": TEXTS,
}
#: ``LocalGPUCluster``'s and ``GPURunner``'s own
_LOCAL = {
    "CUDA_VISIBLE_DEVICES": Form((str, int, list, tuple), "'0,1' or a list of GPU indices",
                                 items=(str, int)),
    "gpus": Form((list, tuple), "a list of GPU indices or UUIDs", items=(str, int)),
    "threads_per_worker": count(1, 4096), "nthreads": count(1, 4096),
    "memory_limit": Form((int, float, str), "'auto', bytes or a size ('20GB')"),
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


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"


def _is(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int to Python, never a count or a size here
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def whole_number(field: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high``, or a ``ValueError`` naming the field.

    >>> whole_number("nodes", "4", 1, 8)
    4
    >>> whole_number("nodes", 9, 1, 8)
    Traceback (most recent call last):
    ...
    ValueError: nodes=9 is more than 8, the most hpcgpu accepts: give a whole number from 1 to 8
    """
    accepted = f"a whole number from {low} to {high}"
    if not _is(value, (int, str)):
        raise KeywordTypeError(f"{field}={_shown(value)} is a {type(value).__name__}: give {accepted}")
    text = value.strip() if isinstance(value, str) else None
    if text is not None and not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise ValueError(f"{field}={_shown(value)} is not {accepted}")
    number = int(value)
    if number > high:
        raise ValueError(f"{field}={_shown(value)} is more than {high}, the most hpcgpu "
                         f"accepts: give {accepted}")
    if number < low:
        raise ValueError(f"{field}={_shown(value)} must be {accepted}")
    return number


def check_value(field: str, value: Any, form: Form) -> None:
    """Refuse ``value`` (None: not given, always taken) unless it has ``form``."""
    if value is None:
        return
    if form.low is not None and form.high is not None:
        whole_number(field, value, form.low, form.high)
        return
    if not _is(value, form.types):
        raise KeywordTypeError(f"{field}={_shown(value)} is a {type(value).__name__}: give {form.text}")
    if isinstance(value, (str, os.PathLike)) and len(os.fspath(value)) > MAX_TEXT:
        raise ValueError(f"{field}={_shown(value)} is longer than {MAX_TEXT} characters: "
                         f"give {form.text} of at most {MAX_TEXT}")
    if form.parse is not None and not isinstance(value, bool):
        try:
            form.parse(value)
        except (ValueError, TypeError, KeyError, OverflowError):
            raise ValueError(f"{field}={_shown(value)} is not understood: give {form.text}") from None
    if form.items is None or isinstance(value, str):
        return
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if not _is(item, form.items):
            raise KeywordTypeError(f"{field}={_shown(value)} holds {_shown(item)}, a "
                                   f"{type(item).__name__}: give {form.text}")


def check_keywords(values: Mapping[str, Any]) -> None:
    """Check every keyword of ``values`` that :data:`KEYWORDS` knows (others are refused as
    unknown where they are resolved); None means "not given" and passes."""
    for name, value in values.items():
        if name in KEYWORDS and value is not None:
            check_value(name, value, _form(name))
