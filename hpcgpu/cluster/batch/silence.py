"""Workers whose heartbeats stopped: which host went quiet, and why where its job's log says.

A host that loses its network leaves its job running and its workers' connections open on
the scheduler's side until a TCP timeout (about 30 s) closes them; the computation waits
meanwhile. Each poll, the cluster looks at its scheduler's workers (in its process, or in a
process of its own on this host): those not heard
from for :data:`SILENT_AFTER` seconds are said once per job and host, with the link line that
their worker command wrote to the job's log (:mod:`hpcgpu.worker.linkwatch`) where there is one.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

__all__ = ["SILENT_AFTER", "heartbeat_ages", "heartbeat_source", "link_line", "silent_after", "silent_hosts",
           "silence_message"]

#: seconds without a heartbeat (a worker of a small cluster sends two a second) before a
#: host is named; at least five of the scheduler's heartbeat intervals in a large one
SILENT_AFTER = 10.0


def silent_after(workers: int) -> float:
    """The silence after which a host is named, for a cluster of ``workers`` workers (their
    heartbeats grow sparse as they grow many: 11 s apart at 2,000).

    >>> silent_after(4), silent_after(2000)
    (10.0, 55.0)
    """
    from distributed.scheduler import heartbeat_interval

    return max(SILENT_AFTER, 5 * heartbeat_interval(workers))


def heartbeat_ages(scheduler: Any, now: float | None = None) -> dict[str, tuple[str, float]]:
    """Worker name -> (its host's address, seconds since its last heartbeat), from an
    in-process ``distributed.Scheduler``, or from the worker infos of ``Scheduler.identity()``
    of one on this host (:func:`heartbeat_source`); ``{}`` for one elsewhere (``scheduler_in_job``:
    another clock).

    >>> heartbeat_ages({"tls://a:1": {"name": "c-0-0", "host": "a", "last_seen": 90.0}}, now=100.0)
    {'c-0-0': ('a', 10.0)}
    """
    workers = scheduler if isinstance(scheduler, Mapping) else getattr(scheduler, "workers", None)
    if not isinstance(workers, Mapping):
        return {}
    now = time.time() if now is None else now
    rows = [(w["name"], w.get("host", "?"), w.get("last_seen")) if isinstance(w, Mapping)
            else (w.name, getattr(w, "host", "?"), getattr(w, "last_seen", None))
            for w in list(workers.values())]
    return {str(name): (str(host), now - seen) for name, host, seen in rows if seen}


def heartbeat_source(scheduler: Any, comm: Any) -> Any:
    """What :func:`heartbeat_ages` reads: the in-process ``scheduler``, or, for a scheduler
    process on this host (its ``same_clock``), a coroutine of its worker infos through
    ``comm`` (``{}`` when it does not answer: the next poll asks again)."""
    if not getattr(scheduler, "same_clock", False) or comm is None:
        return scheduler

    async def infos() -> dict:
        import asyncio

        try:
            return (await asyncio.wait_for(comm.identity(), 5))["workers"]
        except (OSError, asyncio.TimeoutError, KeyError):
            return {}
    return infos()


def silent_hosts(ages: Mapping[str, tuple[str, float]], job_of: Callable[[str], str],
                 after: float = SILENT_AFTER) -> dict[tuple[str, str], tuple[list[str], float]]:
    """(job, host address) -> (its silent workers, the least silence), for workers silent
    ``after`` seconds or more.

    >>> ages = {"c-0-0-0": ("10.78.0.12", 12.0), "c-0-0-1": ("10.78.0.12", 11.0),
    ...         "c-1-0-0": ("10.78.0.11", 0.4)}
    >>> silent_hosts(ages, lambda name: name.rsplit("-", 2)[0])
    {('c-0', '10.78.0.12'): (['c-0-0-0', 'c-0-0-1'], 11.0)}
    """
    found: dict[tuple[str, str], tuple[list[str], float]] = {}
    for name, (host, age) in sorted(ages.items()):
        if age >= after:
            names, least = found.get((job_of(name), host), ([], age))
            found[(job_of(name), host)] = (names + [name], min(least, age))
    return found


def link_line(log: str) -> str | None:
    """The last link-down line of a job's log (its workers' own words), if any.

    >>> link_line("x\\nNetworkCheckError: interface 'ib0' on host node2 is down (link state down): ...\\n")
    "interface 'ib0' on host node2 is down (link state down): ..."
    """
    lines = [line.split("NetworkCheckError:", 1)[1].strip() for line in log.splitlines()
             if "NetworkCheckError:" in line and " is down (link state " in line]
    return lines[-1] if lines else None


def silence_message(job: str, job_id: str | None, host: str, nodes: tuple[str, ...],
                    workers: list[str], age: float, link: str | None) -> str:
    """One line naming the host that went quiet, and why where its log says.

    >>> print(silence_message("c-0", "17", "10.78.0.12", ("node2",), ["c-0-0-0"], 10.5,
    ...                       "interface 'ib0' on host node2 is down (link state down): ..."))
    job c-0 (id 17) on node2 (10.78.0.12): no heartbeat from its worker(s) c-0-0-0 for 10 s: interface 'ib0' on host node2 is down (link state down): ...; its tasks are recomputed on the other workers once the scheduler drops the connection
    """
    where = f"{','.join(nodes)} ({host})" if nodes else host
    why = link or "its host may have lost its network, or its workers are stuck"
    return (f"job {job} (id {job_id}) on {where}: no heartbeat from its worker(s) "
            f"{', '.join(workers)} for {age:.0f} s: {why}; its tasks are recomputed on the "
            "other workers once the scheduler drops the connection")
