"""Scheduler dialects: each scheduler's rendering part, kept under this name for callers.

The dialects live with their schedulers (:mod:`hpcgpu.schedulers`); this module names them.

Examples
--------
>>> get_dialect("slurm").prefix
'#SBATCH'
>>> get_dialect("torque")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: scheduler='torque' is not supported: use one of slurm, pbs, lsf, sge...
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hpcgpu.schedulers.dialect import JOB_STATES, TERMINAL_STATES, Dialect, JobStatus
from hpcgpu.schedulers.lsf.dialect import LSFDialect
from hpcgpu.schedulers.pbs.dialect import PBSDialect
from hpcgpu.schedulers.registry import get_scheduler, scheduler_names
from hpcgpu.schedulers.sge.dialect import SGEDialect
from hpcgpu.schedulers.slurm.dialect import SlurmDialect

__all__ = [
    "DIALECTS", "JOB_STATES", "TERMINAL_STATES", "Dialect", "JobStatus", "LSFDialect", "PBSDialect", "SGEDialect",
    "SlurmDialect", "get_dialect",
]


class _Dialects(Mapping):
    """scheduler name -> dialect class, for every registered scheduler."""

    def __getitem__(self, name: str) -> type[Dialect]:
        if name not in scheduler_names():
            raise KeyError(name)
        return get_scheduler(name).dialect_class

    def __iter__(self) -> Iterator[str]:
        return iter(scheduler_names())

    def __len__(self) -> int:
        return len(scheduler_names())


DIALECTS: Mapping[str, type[Dialect]] = _Dialects()


def get_dialect(name: str, **site_options: Any) -> Dialect:
    """Return the dialect called ``name`` with the site's options.

    Unknown options raise ``ValueError`` naming the options the dialect takes.
    """
    return get_scheduler(name).dialect(**site_options)
