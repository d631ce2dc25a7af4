"""The one registry of schedulers: name -> where its :class:`~hpcgpu.schedulers.base.Scheduler`
lives, imported on first use (the registry never imports its members, so no circle).

A site adds a scheduler out of tree with an entry point in the group ``hpcgpu.schedulers``
(``mysite = "mysite_hpcgpu:SCHEDULER"``, the object a :class:`Scheduler` instance whose
``name`` is the entry point's); a built-in name cannot be replaced that way.

Examples
--------
>>> get_scheduler("slurm").dialect_class.prefix
'#SBATCH'
>>> get_scheduler("torque")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: scheduler='torque' is not supported: use one of slurm, pbs, lsf, sge...
>>> detect({"PBS_JOBID": "7.server"}).name, detect({})
('pbs', None)
"""

from __future__ import annotations

import importlib
import logging
import importlib.metadata
from functools import lru_cache
from typing import Mapping

from hpcgpu.schedulers.base import Scheduler

logger = logging.getLogger("hpcgpu.schedulers")

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "detect", "get_scheduler", "scheduler_names",
           "schedulers"]

#: Entry point group through which a site adds schedulers.
ENTRY_POINT_GROUP = "hpcgpu.schedulers"
#: Built-in schedulers, in the order ``detect`` tries them: name -> "module:attribute".
BUILTIN: dict[str, str] = {
    "slurm": "hpcgpu.schedulers.slurm:SCHEDULER",
    "pbs": "hpcgpu.schedulers.pbs:SCHEDULER",
    "lsf": "hpcgpu.schedulers.lsf:SCHEDULER",
    "sge": "hpcgpu.schedulers.sge:SCHEDULER",
    "flux": "hpcgpu.schedulers.flux:SCHEDULER",
}


@lru_cache(maxsize=1)
def _locations() -> dict[str, str]:
    """Built-in schedulers, then the site's (entry points) under names not built in."""
    found = dict(BUILTIN)
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(point.name, point.value)
    return found


@lru_cache(maxsize=None)
def _load(name: str, location: str) -> Scheduler:
    module, _, attribute = location.partition(":")
    scheduler = getattr(importlib.import_module(module), attribute)
    if not isinstance(scheduler, Scheduler) or scheduler.name != name:
        raise ValueError(f"scheduler {name!r} ({location}) is not a Scheduler named {name!r}: "
                         "point the entry point at an instance of hpcgpu.schedulers.Scheduler")
    return scheduler


def scheduler_names() -> tuple[str, ...]:
    """Every registered scheduler's name, built-in ones first."""
    return tuple(_locations())


def get_scheduler(name: str) -> Scheduler:
    """The scheduler called ``name``; ``ValueError`` naming the known ones otherwise."""
    locations = _locations()
    if name not in locations:
        raise ValueError(f"scheduler={name!r} is not supported: use one of "
                         f"{', '.join(locations)}")
    return _load(name, locations[name])


def schedulers() -> tuple[Scheduler, ...]:
    """Every registered scheduler, in the registry's order; a site's that does not load is
    left out with a warning (``get_scheduler`` of its name raises the reason)."""
    loaded = []
    for name, location in _locations().items():
        try:
            loaded.append(_load(name, location))
        except (ImportError, AttributeError, ValueError) as error:
            if name in BUILTIN:
                raise
            logger.warning("scheduler %r of entry point %s left out: %s", name, location, error)
    return tuple(loaded)


def detect(env: Mapping[str, str]) -> Scheduler | None:
    """The scheduler whose job ``env`` is a process of (the first that claims it), or None."""
    return next((s for s in schedulers() if s.in_job(env)), None)
