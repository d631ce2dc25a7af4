"""Scheduler dialects: SLURM, PBS Pro, LSF and Grid Engine.

Examples
--------
>>> get_dialect("slurm").prefix
'#SBATCH'
>>> get_dialect("torque")
Traceback (most recent call last):
...
ValueError: scheduler='torque' is not supported: use one of slurm, pbs, lsf, sge
"""

from __future__ import annotations

from typing import Any

from hpcgpu.jobspec.dialects.base import JOB_STATES, TERMINAL_STATES, Dialect, JobStatus
from hpcgpu.jobspec.dialects.lsf import LSFDialect
from hpcgpu.jobspec.dialects.pbs import PBSDialect
from hpcgpu.jobspec.dialects.sge import SGEDialect
from hpcgpu.jobspec.dialects.slurm import SlurmDialect

__all__ = [
    "DIALECTS", "JOB_STATES", "TERMINAL_STATES", "Dialect", "JobStatus", "LSFDialect", "PBSDialect", "SGEDialect",
    "SlurmDialect", "get_dialect",
]

DIALECTS: dict[str, type[Dialect]] = {
    "slurm": SlurmDialect,
    "pbs": PBSDialect,
    "lsf": LSFDialect,
    "sge": SGEDialect,
}


def get_dialect(name: str, **site_options: Any) -> Dialect:
    """Return the dialect called ``name`` with the site's options.

    Unknown options raise ``ValueError`` naming the options the dialect takes.
    """
    try:
        cls = DIALECTS[name]
    except KeyError:
        raise ValueError(
            f"scheduler={name!r} is not supported: use one of {', '.join(DIALECTS)}"
        ) from None
    try:
        return cls(**site_options)
    except TypeError:
        known = sorted(f for f in cls.__dataclass_fields__)
        unknown = sorted(set(site_options) - set(known))
        raise ValueError(
            f"unknown {name} site option(s) {', '.join(unknown)}: known are {', '.join(known)}"
        ) from None
