"""Hosts a cluster's new jobs stay off: those where a worker failed the network check.

A worker that finds its host's network unusable (its interface down or missing, the
scheduler unreachable from there: :mod:`hpcgpu.worker.reach`) stops with a
``NetworkCheckError:`` line that names the host. The batch scheduler still sees that host
idle and would put the replacement there again, and again, until ``max_failed_jobs`` ends
the replacing. So the cluster keeps every job it submits next off that host, in the
scheduler's own words (:meth:`~hpcgpu.schedulers.dialect.Dialect.exclusion_directives`:
``--exclude``, ``-l h=!``, ``select[hname!=]``), for its life or ``exclude_failed_hosts``
seconds. Where the scheduler has no such request (PBS), a job seen starting on an excluded
host is cancelled and replaced at that poll (:mod:`hpcgpu.cluster.batch.monitor`).

The decisions are pure functions of frozen values (:func:`failed_hosts`,
:func:`excluded_after`, :func:`active`); :class:`HostExclusions` holds the cluster's
current ones and says each new one in one log line.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpcgpu.jobspec.keywords import check_keywords
from hpcgpu.system import config

__all__ = ["Exclusion", "HostExclusions", "active", "addresses", "excluded_after",
           "exclusion_policy", "failed_hosts"]

logger = logging.getLogger("hpcgpu.cluster")

#: ``NetworkCheckError: ... host H ...``: the first host its message names is the worker's
_CHECK = re.compile(r"NetworkCheckError:.*?\bhost ([A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])")


@dataclass(frozen=True)
class Exclusion:
    """Host ``host`` is kept out of new jobs from ``since`` (monotonic seconds) until
    ``until`` (None: the cluster's life), because of ``why`` (the worker's own words)."""

    host: str
    why: str
    since: float
    until: float | None = None

    def active(self, now: float) -> bool:
        return self.until is None or now < self.until


def exclusion_policy(value: Any = None) -> float | None | bool:
    """``exclude_failed_hosts`` as seconds (``None``: the cluster's life; ``False``: never
    exclude); ``None`` reads the config key ``hpcgpu.exclude-failed-hosts``, checked as the
    keyword is.

    >>> exclusion_policy(True), exclusion_policy("30 minutes"), exclusion_policy(False)
    (None, 1800, False)
    >>> exclusion_policy("soon")
    Traceback (most recent call last):
    ...
    ValueError: exclude_failed_hosts='soon' is not understood: give True (the cluster's life), a duration ('30 minutes', 600) or False
    """
    if value is None:
        value = config.get("exclude-failed-hosts", True)
    check_keywords({"exclude_failed_hosts": value})
    if isinstance(value, bool):
        return None if value else False
    if isinstance(value, str) and value.strip().lower() in ("off", "false", "none", "never"):
        return False
    from dask.utils import parse_timedelta

    return parse_timedelta(value, default="seconds")


def addresses(name: str) -> frozenset[str]:
    """The addresses ``name`` resolves to here (none where it does not resolve).

    >>> "127.0.0.1" in addresses("localhost"), addresses("no-such-host.invalid")
    (True, frozenset())
    """
    try:
        return frozenset(info[4][0] for info in socket.getaddrinfo(name, None))
    except (OSError, UnicodeError):
        return frozenset()


def failed_hosts(errors: Iterable[str], nodes: Sequence[str],
                 resolve: Callable[[str], frozenset[str]] = addresses) -> dict[str, str]:
    """Scheduler's node name -> the network check's message, for each ``NetworkCheckError``
    line of ``errors`` (a failed job's first errors); ``nodes``: the job's nodes as the
    scheduler names them. The host a message names is matched to one of them, by name or
    short name (``node2`` -> ``node2.site``), else by address (``resolve``: a host whose
    scheduler's name is another, as OpenPBS's ``vm-pbs`` for the host ``vm``, both in
    ``/etc/hosts`` on one address) where exactly one node has it; a job of one node needs no
    match. A host matched to no node is left out: excluding a name the scheduler does not
    know would fail every submission.

    >>> failed_hosts(["NetworkCheckError: interface 'ib0' on host node2 is down (link state down): ..."],
    ...              ["node2.site"])
    {'node2.site': "interface 'ib0' on host node2 is down (link state down): ..."}
    >>> failed_hosts(["ValueError: host node3 said no"], ["node3"])
    {}
    >>> where = {"vm": {"10.0.0.5"}, "vm-pbs": {"10.0.0.5"}, "gpu2": {"10.0.0.6"}}.get
    >>> failed_hosts(["NetworkCheckError: host vm cannot reach the scheduler"], ["vm-pbs", "gpu2"], where)
    {'vm-pbs': 'host vm cannot reach the scheduler'}
    >>> failed_hosts(["NetworkCheckError: host vm cannot reach the scheduler"], ["node1", "node2"],
    ...              lambda name: {"10.0.0.5"})  # one host's fake nodes: which one is unknown
    {}
    """
    found: dict[str, str] = {}
    for line in errors:
        if (match := _CHECK.search(line)) is None:
            continue
        host, short = match.group(1), match.group(1).split(".")[0]
        node = next((n for n in nodes if n == host), None) or next(
            (n for n in nodes if n.split(".")[0] == short), None)
        if node is None and len(nodes) == 1:
            node = nodes[0]
        if node is None and (mine := resolve(host)):  # only where one node has its address
            same = [n for n in nodes if mine & set(resolve(n) or ())]
            node = same[0] if len(same) == 1 else None
        if node is not None:
            found.setdefault(node, line.split("NetworkCheckError:", 1)[1].strip())
    return found


def active(exclusions: Iterable[Exclusion], now: float) -> tuple[Exclusion, ...]:
    """The exclusions still in force at ``now``."""
    return tuple(e for e in exclusions if e.active(now))


def excluded_after(current: tuple[Exclusion, ...], failed: Mapping[str, str], now: float,
                   policy: float | None | bool) -> tuple[tuple[Exclusion, ...], tuple[Exclusion, ...]]:
    """``(every exclusion in force, the new ones)`` after the network check failed on the
    hosts of ``failed`` at ``now``; a host excluded already keeps its exclusion, one whose
    time ran out is excluded again (``policy``: :func:`exclusion_policy`).

    >>> first, new = excluded_after((), {"node2": "ib0 down"}, 100.0, 600)
    >>> new
    (Exclusion(host='node2', why='ib0 down', since=100.0, until=700.0),)
    >>> excluded_after(first, {"node2": "ib0 down"}, 200.0, 600)[1]
    ()
    >>> excluded_after(first, {"node2": "ib0 down"}, 800.0, 600)[1][0].until
    1400.0
    >>> excluded_after((), {"node2": "ib0 down"}, 0.0, False)
    ((), ())
    """
    kept = active(current, now)
    if policy is False:
        return kept, ()
    known = {e.host for e in kept}
    until = None if policy is None else now + float(policy)
    new = tuple(Exclusion(host, why, now, until) for host, why in sorted(failed.items())
                if host not in known)
    return kept + new, new


class HostExclusions:
    """A cluster's excluded hosts (``policy``: :func:`exclusion_policy`'s value).

    >>> from hpcgpu.jobspec.dialects import SlurmDialect
    >>> hosts = HostExclusions(600)
    >>> _ = hosts.note(["NetworkCheckError: host node2 cannot reach the scheduler"], ["node2"], now=0.0)
    >>> hosts.job_options({"job_extra_directives": ["--qos=x"]}, SlurmDialect(), now=1.0)
    {'job_extra_directives': ['--qos=x', '--exclude=node2']}
    >>> hosts.hosts(now=601.0)
    ()
    """

    def __init__(self, policy: float | None | bool = None) -> None:
        self.policy = policy
        self.exclusions: tuple[Exclusion, ...] = ()

    def note(self, errors: Iterable[str], nodes: Sequence[str], now: float | None = None,
             job: str = "a job") -> tuple[Exclusion, ...]:
        """Exclude the hosts whose network check failed in ``errors``: the new exclusions,
        each said in one log line."""
        now = time.monotonic() if now is None else now
        self.exclusions, new = excluded_after(self.exclusions, failed_hosts(errors, nodes), now,
                                              self.policy)
        for e in new:
            span = "for the cluster's life" if e.until is None else f"for {e.until - e.since:g} s"
            logger.warning("host %s excluded from new jobs %s: a worker of %s failed the network "
                           "check there: %s", e.host, span, job, e.why)
        return new

    def hosts(self, now: float | None = None) -> tuple[str, ...]:
        """The hosts excluded now (an exclusion whose time ran out is dropped, and said)."""
        now = time.monotonic() if now is None else now
        kept = active(self.exclusions, now)
        for e in set(self.exclusions) - set(kept):
            logger.info("host %s is no longer excluded from new jobs (its exclusion of %g s "
                        "ended)", e.host, (e.until or now) - e.since)
        self.exclusions = kept
        return tuple(sorted(e.host for e in kept))

    def job_options(self, options: dict, dialect: Any, now: float | None = None) -> dict:
        """A new job's ``options`` with the dialect's exclusion directives added to its
        ``job_extra_directives`` (the same ``options`` when no host is excluded)."""
        lines = dialect.exclusion_directives(self.hosts(now))
        if not lines:
            return options
        return {**options, "job_extra_directives": [*(options.get("job_extra_directives") or ()), *lines]}
