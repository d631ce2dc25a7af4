"""The cluster's side of walltime-aware retirement: replace a job before its workers retire.

Each running job's workers retire on their own before the walltime
(:mod:`hpcgpu.worker.walltime`). ``replace_ahead`` seconds before the first of them may retire,
the cluster marks the job *retiring*, takes it out of its spec (so ``scale``/``adapt`` count its
replacement instead) and submits the replacement; the retiring job is not cancelled but left to
end by itself, its workers handing their data to the others first. Closing the cluster still
cancels it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from distributed.core import Status

from hpcgpu.system import config
from hpcgpu.jobspec.walltime import Retirement, preemption_directives, retirement_off

__all__ = ["WalltimeReplacement", "retirement_options"]

logger = logging.getLogger("hpcgpu.cluster")


def retirement_options(dialect: str, walltime: int, retire_before: Any = None,
                       lifetime_stagger: Any = None, replace_ahead: Any = None,
                       signal_before_walltime: Any = None,
                       requeue: bool = False) -> tuple[Retirement | None, dict, list[str]]:
    """Validate the retirement options: the plan (None when off), the job options that carry
    them to the workers, and the extra directives for the warning signal / requeue.

    Examples
    --------
    >>> plan, job, extra = retirement_options("slurm", 120, signal_before_walltime=30)
    >>> plan.retire_before, job, extra
    (60.0, {'retire_before': None, 'lifetime_stagger': None}, ['--signal=USR1@30'])
    >>> retirement_options("slurm", 3600, retire_before="off")[0] is None
    True
    >>> retirement_options("slurm", 120, signal_before_walltime="soon")
    Traceback (most recent call last):
    ...
    ValueError: signal_before_walltime='soon' is not a duration: give seconds (90) or text \
('5 minutes', '90s'), or 'auto'
    """
    from hpcgpu.jobspec.walltime import _seconds

    before = config.get("retire-before") if retire_before is None else retire_before
    stagger = config.get("lifetime-stagger") if lifetime_stagger is None else lifetime_stagger
    ahead = config.get("replace-ahead") if replace_ahead is None else replace_ahead
    off = retirement_off(before)
    plan = None if off else Retirement.create(walltime, before, stagger, ahead)
    job = {"retire_before": "off" if off else (None if before is None else str(before)),
           "lifetime_stagger": None if stagger is None else str(stagger)}
    signal_before = signal_before_walltime
    if signal_before is True:
        signal_before = 120
    seconds = _seconds(signal_before, "signal_before_walltime") if signal_before else None
    return plan, job, preemption_directives(dialect, seconds, bool(requeue))


class WalltimeReplacement:
    """Mixin for :class:`~hpcgpu.cluster.GPUCluster` (after :class:`JobMonitor`)."""

    _retirement: Retirement | None

    def _retiring_jobs(self) -> set[str]:
        """Jobs left to retire by themselves (not to be cancelled while the cluster runs)."""
        if self.status != Status.running:
            return set()
        return {name for name, r in self._records.items() if r.retiring and not r.ended}

    def _replace_expiring(self) -> None:
        """Mark jobs whose workers retire soon, and submit their replacements."""
        if self.status != Status.running:
            return
        now, replaced = time.monotonic(), []
        for name, record in self._records.items():
            plan = self._job_pool(name).retirement  # each pool's walltime
            if (plan is None or record.started is None or record.retiring or record.ended
                    or name not in self.worker_spec or now - record.started < plan.replace_at):
                continue
            record.retiring = True
            del self.worker_spec[name]
            replaced.append(name)
        for name in replaced:
            pool = self._job_pool(name)
            self.worker_spec.update(self.new_worker_spec(pool.name))
            plan, record = pool.retirement, self._records[name]
            left = max(plan.first_retirement - (now - record.started), 0)
            message = (f"job {name} (id {record.job_id}) nears its walltime: its workers retire "
                       f"from about {left:.0f} s from now, their data moving to other workers; "
                       "a replacement is submitted")
            self.events.append(message)
            logger.info("%s", message)
        if replaced:
            self.loop.add_callback(self._correct_state)
