"""Configuration, resolved in one place.

For every option: the explicit argument > the chosen site profile > ``hpcgpu.<scheduler>.*``
> the user's own ``jobqueue.<scheduler>.*`` (only values that differ from dask-jobqueue's
packaged defaults, so its ``walltime: 00:30:00`` does not silently win) >
``hpcgpu.defaults.*``. The defaults live in the packaged ``hpcgpu.yaml``, registered with
``dask.config`` at import; nothing is written to the user's home.
"""

from __future__ import annotations

import importlib.util
import re
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import dask.config
import yaml

from hpcgpu.system.spelling import closest

__all__ = ["OPTIONS", "JOBQUEUE_KEYS", "ensure_jobqueue_section", "get", "jobqueue_defaults",
           "resolve", "profile_names", "origin", "naming_the_source", "site_profile"]

#: libyaml's safe loader where PyYAML has it: the pure-Python one took 6.7 ms of every
#: process's import of this module (2-core machine), libyaml's 0.7 ms; the same values
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML = Path(__file__).with_name("hpcgpu.yaml")
with _YAML.open() as _file:
    _PACKAGED = yaml.load(_file, Loader=_SAFE_LOADER)
dask.config.update_defaults(_PACKAGED)

#: The options resolved for a cluster (Python names).
OPTIONS = tuple(
    key.replace("-", "_") for key in dask.config.get("hpcgpu.defaults")
)
#: hpcgpu option -> the jobqueue.<scheduler> key that means the same (per scheduler).
JOBQUEUE_KEYS: dict[str, str] = {
    "queue": "queue", "walltime": "walltime", "job_name": "name", "python": "python",
    "interface": "interface", "death_timeout": "death-timeout",
    "local_directory": "local-directory", "log_directory": "log-directory",
    "shared_temp_directory": "shared-temp-directory", "shebang": "shebang",
    "job_extra_directives": "job-extra-directives", "job_directives_skip": "job-directives-skip",
    "job_script_prologue": "job-script-prologue", "worker_extra_args": "worker-extra-args",
    "scheduler_options": "scheduler-options",
}


def get(key: str, default: Any = None) -> Any:
    """``dask.config.get("hpcgpu." + key)``.

    Falls back to the packaged value where the config was reset without hpcgpu's defaults
    (as test suites that clear ``dask.config.config`` do).

    >>> get("max-failed-jobs")
    3
    """
    try:
        return dask.config.get(f"hpcgpu.{key}")
    except KeyError:
        return dask.config.get(f"hpcgpu.{key}", default, config=_PACKAGED)


def profile_names() -> list[str]:
    """Names of the configured site profiles.

    >>> "local-gpu" in profile_names()
    True
    """
    return sorted(dask.config.get("hpcgpu.profiles", {}) or {})


@lru_cache(maxsize=1)
def _jobqueue_packaged() -> dict:
    spec = importlib.util.find_spec("dask_jobqueue")
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).with_name("jobqueue.yaml")
    return yaml.load(path.read_text(), Loader=_SAFE_LOADER).get("jobqueue", {}) if path.exists() else {}


def jobqueue_defaults(scheduler: str) -> dict[str, Any]:
    """dask-jobqueue's packaged ``jobqueue.<scheduler>`` section; for a scheduler it has no
    section for, the keys all its sections share (their value, or None where they differ).

    >>> shared = jobqueue_defaults("no-such-scheduler")
    >>> shared["name"], shared["interface"], shared["job-extra-directives"]
    ('dask-worker', None, None)
    """
    packaged = _jobqueue_packaged()
    if scheduler in packaged or not packaged:
        return packaged.get(scheduler, {})
    sections = list(packaged.values())
    shared = set.intersection(*(set(section) for section in sections))
    return {key: sections[0][key] if all(s[key] == sections[0][key] for s in sections) else None
            for key in sorted(shared)}


def ensure_jobqueue_section(scheduler: str) -> None:
    """Register :func:`jobqueue_defaults` as ``jobqueue.<scheduler>``'s defaults where dask's
    config has no such section: dask-jobqueue's cluster and job read theirs by name."""
    if dask.config.get(f"jobqueue.{scheduler}", None) is None:
        dask.config.update_defaults({"jobqueue": {scheduler: jobqueue_defaults(scheduler)}})


def _from_jobqueue(scheduler: str, account_key: str) -> dict[str, Any]:
    """The user's own ``jobqueue.<scheduler>`` values (those not equal to the packaged ones);
    ``account_key``: the key that holds the account there (``account`` or ``project``)."""
    mine = dask.config.get(f"jobqueue.{scheduler}", {}) or {}
    packaged = jobqueue_defaults(scheduler)
    keys = dict(JOBQUEUE_KEYS, account=account_key)
    return {
        option: mine[key] for option, key in keys.items()
        if key in mine and mine[key] is not None and mine[key] != packaged.get(key)
    }


def _section(key: str) -> dict[str, Any]:
    values = dask.config.get(key, None)
    if values is None:  # config reset without hpcgpu's defaults
        values = dask.config.get(key, {}, config=_PACKAGED)
    values = values or {}
    return {k.replace("-", "_"): v for k, v in values.items() if v is not None}


def resolve(scheduler: str, explicit: dict[str, Any], account_key: str = "account") -> dict[str, Any]:
    """Return every option in :data:`OPTIONS` for ``scheduler``, highest source first.

    ``explicit`` holds the arguments the user passed (``None`` means "not passed");
    ``account_key`` the ``jobqueue.<scheduler>`` key of the account (the scheduler's own).
    Unknown profiles raise ``ValueError`` naming the configured ones.

    Examples
    --------
    >>> with dask.config.set({"hpcgpu.slurm.walltime": "00:10:00",
    ...                       "jobqueue.slurm.queue": "long"}):
    ...     opts = resolve("slurm", {"gpus_per_node": 4})
    >>> opts["gpus_per_node"], opts["walltime"], opts["queue"], opts["job_name"]
    (4, '00:10:00', 'long', 'hpcgpu')
    >>> resolve("slurm", {"profile": "local-gpu"})["site"]
    {'gpu_directive': 'gres'}
    """
    explicit = {k: v for k, v in explicit.items() if v is not None}
    layers = [values for _, values in _layers(scheduler, explicit, account_key)]
    resolved = {}
    for option in OPTIONS:
        resolved[option] = next((layer[option] for layer in layers if option in layer), None)
    unknown = sorted(set(explicit) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}: known are {', '.join(OPTIONS)}")
    return resolved


def _layers(scheduler: str, explicit: dict[str, Any],
            account_key: str) -> list[tuple[str, dict[str, Any]]]:
    """The sources of :func:`resolve`, highest first, each with its words for messages
    (``{}`` stands for the option's key)."""
    per_scheduler = _section(f"hpcgpu.{scheduler}")
    name = explicit.get("profile") or per_scheduler.get("profile")
    return [("", explicit),
            (f"profile {name!r} (hpcgpu.profiles.{name}.{{}})", _profile(name, scheduler) if name else {}),
            (f"hpcgpu.{scheduler}.{{}}", per_scheduler),
            (f"jobqueue.{scheduler}.{{}}", _from_jobqueue(scheduler, account_key)),
            ("hpcgpu.defaults.{}", _section("hpcgpu.defaults"))]


def origin(scheduler: str, explicit: dict[str, Any], option: str,
           account_key: str = "account") -> str:
    """Where :func:`resolve` took ``option`` from, in a message's words ("" for an argument).

    >>> with dask.config.set({"hpcgpu.profiles.mine": {"walltime": "forever"}}):
    ...     origin("slurm", {"profile": "mine"}, "walltime")
    "profile 'mine' (hpcgpu.profiles.mine.walltime) of your dask config"
    >>> origin("slurm", {"walltime": "1:00:00"}, "walltime")
    ''
    """
    explicit = {k: v for k, v in explicit.items() if v is not None}
    for words, values in _layers(scheduler, explicit, account_key):
        site = values.get("site")
        if option not in values and isinstance(site, dict) and option in site:
            option = "site"  # a site option (gpu_directive=...): the value of ``site``
        if option in values:
            key = option.replace("_", "-") if words.startswith(("hpcgpu", "profile")) else option
            return words.format(key) + " of your dask config" if words else ""
    return ""


_SOURCE = "the value comes from"


@contextmanager
def naming_the_source(scheduler: str, explicit: dict[str, Any], account_key: str = "account"):
    """Inside it, a ``ValueError`` whose message starts with ``option=`` says where a value
    that was not an argument came from (a profile, ``hpcgpu.<scheduler>.*``, ...): the
    user's ``~/.config/dask/*.yaml`` or ``DASK_*`` variables, not the call they wrote.

    >>> with dask.config.set({"hpcgpu.slurm.nodes": 0}):
    ...     with naming_the_source("slurm", {}):
    ...         raise ValueError("nodes=0 must be at least 1")
    Traceback (most recent call last):
    ...
    ValueError: nodes=0 must be at least 1 (the value comes from hpcgpu.slurm.nodes of your dask config: ~/.config/dask/*.yaml or DASK_* variables)
    """
    try:
        yield
    except ValueError as error:
        match = re.match(r"(\w+)=", str(error))
        where = origin(scheduler, explicit, match.group(1), account_key) if match else ""
        if not where or _SOURCE in str(error):  # an inner check named it already
            raise
        raise ValueError(f"{error} ({_SOURCE} {where}: ~/.config/dask/*.yaml or "
                         "DASK_* variables)") from None


def site_profile(scheduler: str, profile: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """``(name, values)`` of the site profile a cluster of ``scheduler`` uses: ``profile``,
    else ``hpcgpu.<scheduler>.profile`` (``(None, {})`` without one); keys underscored.

    >>> site_profile("slurm", "local-gpu")[1]["queue"], site_profile("slurm")
    ('gpu', (None, {}))
    """
    name = profile or _section(f"hpcgpu.{scheduler}").get("profile")
    return name, (_profile(name, scheduler) if name else {})


def _profile(name: str, scheduler: str) -> dict[str, Any]:
    profiles = dask.config.get("hpcgpu.profiles", {}) or {}
    if name not in profiles:
        raise ValueError(
            f"profile={name!r} is not configured: use one of {', '.join(profile_names())} "
            "or add it under hpcgpu.profiles in your dask config"
        )
    values = {k.replace("-", "_"): v for k, v in profiles[name].items() if v is not None}
    _check_profile_keys(name, values)
    wanted = values.pop("scheduler", scheduler)
    if wanted != scheduler:
        raise ValueError(
            f"profile={name!r} is for scheduler {wanted!r}, not {scheduler!r}: use "
            f"{wanted.upper()}Cluster(profile={name!r}) or another profile"
        )
    return values


#: What a profile may hold besides the options: its scheduler and the site's job caps
#: (read by hpcgpu.cluster.batch.admission).
_PROFILE_ONLY = ("scheduler", "max_queued_jobs", "max_running_jobs")


def _check_profile_keys(name: str, values: dict[str, Any]) -> None:
    """A key no option reads would be dropped without a word (a typo's job runs with the
    default): refuse it, naming the closest key."""
    known = [k for k in (*OPTIONS, *_PROFILE_ONLY) if k != "profile"]
    unknown = sorted(set(values) - set(known))
    if not unknown:
        return
    dashed = [k.replace("_", "-") for k in known]
    guesses = [closest(k.replace("_", "-"), dashed) for k in unknown]
    hint = " or ".join(g for g in guesses if g)
    raise ValueError(
        f"profile {name!r} (hpcgpu.profiles.{name} of your dask config) has no key "
        f"{', '.join(k.replace('_', '-') for k in unknown)}: "
        + (f"did you mean {hint}? " if hint else "") + f"A profile holds {', '.join(dashed)}")
