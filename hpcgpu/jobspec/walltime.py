"""Walltime-aware retirement: when a job's workers retire and when its replacement is submitted.

A batch job ends at its walltime whatever runs in it. hpcgpu's workers know when their job
ends (the scheduler's own end time where it tells, else the rendered walltime) and retire
through Dask's ``--lifetime``/``--lifetime-stagger`` machinery: the scheduler moves their data
to other workers and gives them no new tasks, staggered so that not all workers of a cluster
leave at once. The cluster submits a replacement job ``replace_ahead`` seconds before the
first of them retires, so that its workers are there to take the data.

Timeline of one job (``W`` = walltime, ``R`` = retire_before, ``S`` = stagger)::

    start ....... replace ...... [W-R-2S ... W-R] workers retire ...... W end
                  (W-R-2S-ahead)

:class:`Retirement` is pure arithmetic; the worker side is :mod:`hpcgpu.worker.walltime`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dask.utils import parse_timedelta

from hpcgpu.schedulers.registry import get_scheduler

__all__ = ["Retirement", "preemption_directives", "retirement_off"]


def retirement_off(retire_before: Any) -> bool:
    """Whether ``retire_before`` turns walltime retirement off (``"off"``, ``False``).

    >>> retirement_off("off"), retirement_off(False), retirement_off("5m"), retirement_off(None)
    (True, True, False, False)
    """
    return str(retire_before).lower() in ("off", "false")


def _seconds(value: Any, field: str) -> float | None:
    if value is None or value == "auto":
        return None
    try:
        seconds = float(parse_timedelta(value, default="seconds"))
    except (ValueError, TypeError, KeyError):
        raise ValueError(f"{field}={value!r} is not a duration: give seconds (90) or "
                         "text ('5 minutes', '90s'), or 'auto'") from None
    if seconds < 0:
        raise ValueError(f"{field}={value!r} must not be negative")
    return seconds


@dataclass(frozen=True)
class Retirement:
    """When the workers of a job of ``walltime`` seconds retire, and when to replace it.

    Attributes
    ----------
    walltime : int
        The job's walltime in seconds.
    retire_before : float
        Every worker has started retiring this many seconds before the walltime.
    stagger : float
        Workers retire at random times spread over ``2 * stagger`` seconds before that.
    replace_ahead : float
        The replacement job is submitted this long before the first worker retires (time
        for it to start and its workers to connect).

    Examples
    --------
    >>> r = Retirement.create(3600)
    >>> r.retire_before, r.stagger, r.replace_at
    (180.0, 180.0, 3000.0)
    >>> r.lifetime(remaining=3500)  # centre of Dask's lifetime +/- stagger
    3140.0
    >>> Retirement.create(120, retire_before="60s")
    Retirement(walltime=120, retire_before=60.0, stagger=6.0, replace_ahead=60.0)
    >>> Retirement.create(120, "40s", "5s", "30s").replace_at
    40.0
    >>> Retirement.create(120, retire_before=200)
    Traceback (most recent call last):
    ...
    ValueError: retire_before=200 leaves no time to work in a walltime of 120 s: give at \
most half of the walltime, or a longer walltime
    """

    walltime: int
    retire_before: float
    stagger: float
    replace_ahead: float

    @classmethod
    def create(cls, walltime: int, retire_before: Any = None, stagger: Any = None,
               replace_ahead: Any = None) -> Retirement:
        """Defaults: retire 5 % of the walltime before its end (at least 60 s, at most
        15 min, at most half), stagger over 2 x 5 % (at most 5 min), replace 60 s ahead."""
        before = _seconds(retire_before, "retire_before")
        spread = _seconds(stagger, "lifetime_stagger")
        ahead = _seconds(replace_ahead, "replace_ahead")
        if before is None:
            before = min(max(60.0, 0.05 * walltime), 900.0, walltime / 2)
        elif before > walltime / 2:
            raise ValueError(
                f"retire_before={retire_before!r} leaves no time to work in a walltime of "
                f"{walltime} s: give at most half of the walltime, or a longer walltime")
        if spread is None:
            spread = min(0.05 * walltime, 300.0, (walltime - before) / 4)
        return cls(walltime, float(before), float(spread), 60.0 if ahead is None else ahead)

    def lifetime(self, remaining: float) -> float:
        """The ``--lifetime`` (centre) for a worker whose job ends in ``remaining`` s;
        Dask adds a uniform random +/- ``stagger``. Never below 1 s."""
        return max(remaining - self.retire_before - self.stagger, 1.0)

    @property
    def first_retirement(self) -> float:
        """Seconds after the job started at which its first worker may retire."""
        return self.walltime - self.retire_before - 2 * self.stagger

    @property
    def replace_at(self) -> float:
        """Seconds after the job started at which the replacement is submitted; never before
        a quarter of the walltime, so that replacements cannot cascade (each replacement
        would otherwise be replaced at once)."""
        return max(self.first_retirement - self.replace_ahead, self.walltime / 4)


def preemption_directives(dialect: str, signal_before: int | None, requeue: bool) -> list[str]:
    """Directives that ask the scheduler for a warning signal and, where asked, a requeue.

    The warning goes to the worker processes themselves (not to the batch shell, unlike batch
    mode's ``B:``), which drain on SIGUSR1 (:mod:`hpcgpu.worker.walltime`).

    Examples
    --------
    >>> preemption_directives("slurm", 120, True)
    ['--signal=USR1@120', '--requeue']
    >>> preemption_directives("sge", 60, True)
    ['-notify', '-r y']
    >>> preemption_directives("lsf", 90, False)
    ['-wa USR1', '-wt 2']
    >>> preemption_directives("pbs", None, True)
    ['-r y']
    """
    return get_scheduler(dialect).preemption_lines(signal_before, requeue)
