"""Scheduler faults: which command failures are worth retrying, and bounded retries.

A controller that is down or busy (slurmctld restarting, qmaster failing over) is transient:
submission is retried a bounded number of times with exponential backoff, each attempt logged
with the scheduler's own words. Everything else (an unknown partition, a rejected script, a
missing ``sbatch``) fails at once with the scheduler's message. A status call that fails is
never read as "the jobs are gone": the poll is skipped and the jobs keep their last state.
"""

from __future__ import annotations

import asyncio
import logging
import re

from hpcgpu.system import commands, config
from hpcgpu.system.commands import CommandError, CommandResult

__all__ = ["cancel_together", "is_transient", "status_failed", "submit_with_retries",
           "TRANSIENT_PATTERNS"]

logger = logging.getLogger("hpcgpu.cluster")

#: What the schedulers' clients say when their controller cannot be reached or is busy.
TRANSIENT_PATTERNS = (
    r"Unable to contact slurm controller", r"Socket timed out", r"Zero Bytes were transmitted",
    r"slurm_receive_msg", r"Resource temporarily unavailable", r"try again later",
    r"unable to contact qmaster", r"commlib error", r"cannot reach qmaster",
    r"Connection refused", r"cannot connect to server", r"Communication failure",
    r"LSF is down", r"not responding", r"did not answer within",
)
#: What a status command says when only the jobs asked about are unknown (they are gone).
_GONE_PATTERNS = (r"Invalid job id", r"Unknown Job Id", r"Job <[^>]+> is not found",
                  r"do not exist")


def is_transient(result: CommandResult) -> bool:
    """Whether a failed command is worth retrying (the controller, not the request).

    Examples
    --------
    >>> r = CommandResult(("sbatch", "x"), 1, "",
    ...     "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
    ...     "(connect failure)")
    >>> is_transient(r)
    True
    >>> is_transient(CommandResult(("sbatch", "x"), 1, "",
    ...     "sbatch: error: invalid partition specified: nope"))
    False
    >>> is_transient(CommandResult(("sbatch", "x"), 127, "", "sbatch: command not found"))
    False
    """
    if result.returncode in (0, 127):
        return False
    text = result.stderr + result.stdout
    return result.returncode == 124 or any(re.search(p, text, re.I) for p in TRANSIENT_PATTERNS)


def status_failed(result: CommandResult) -> bool:
    """Whether a status call failed as a whole (as opposed to "those jobs are gone").

    Examples
    --------
    >>> status_failed(CommandResult(("squeue",), 1, "",
    ...     "slurm_load_jobs error: Invalid job id specified"))
    False
    >>> status_failed(CommandResult(("squeue",), 1, "",
    ...     "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"))
    True
    """
    if result.returncode == 0:
        return False
    text = result.stderr + result.stdout
    return is_transient(result) or not any(re.search(p, text) for p in _GONE_PATTERNS)


async def submit_with_retries(argv: list[str], retries: int | None = None,
                              backoff: float | None = None, input: str | None = None) -> CommandResult:
    """Run the submit command (``input``: the job script, on its standard input); retry
    transient failures ``retries`` times, waiting ``backoff``, 2 x ``backoff``, 4 x ...
    seconds; raise :class:`CommandError` otherwise."""
    from dask.utils import parse_timedelta

    retries = int(config.get("submit-retries") if retries is None else retries)
    wait = parse_timedelta(config.get("submit-backoff") if backoff is None else backoff)
    for attempt in range(retries + 1):
        result = await asyncio.to_thread(commands.run, argv, timeout=120, check=False,
                                         input=input)
        if result.returncode == 0:
            if attempt:
                logger.warning("%s succeeded on attempt %d", argv[0], attempt + 1)
            return result
        if attempt == retries or not is_transient(result):
            break
        logger.warning("%s (attempt %d of %d); retrying in %g s",
                       CommandError(result), attempt + 1, retries + 1, wait)
        await asyncio.sleep(wait)
        wait *= 2
    hint = (f"gave up after {retries + 1} attempts: is the scheduler's controller up? "
            "(`sinfo`, `qstat`, `bjobs` on the login node)" if is_transient(result) else "")
    raise CommandError(result, hint)


async def cancel_together(dialect, jobs: list) -> None:
    """Cancel ``jobs`` (:class:`~hpcgpu.cluster.GPUJob`) with ONE cancel command, then close
    them: scaling 200 jobs down is one ``scancel``, not 200."""
    ids = [job.job_id for job in jobs if job.job_id and not getattr(job, "ended", False)]
    for start in range(0, len(ids), 500):  # keep the command line short
        chunk = ids[start:start + 500]
        # Synchronous: this runs on the way out too, when asyncio.to_thread's pool is gone.
        done = commands.run(dialect.cancel_argv(chunk), timeout=120, check=False)
        if done.returncode != 0:
            logger.warning("%s", CommandError(done))
        logger.info("cancelled job(s) %s", " ".join(chunk))
    for job in jobs:
        job.ended = True  # cancelled above: GPUJob.close has nothing left to cancel
    await asyncio.gather(*(job.close() for job in jobs))
