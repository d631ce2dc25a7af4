"""The worker's side of retirement: when does my job end, and drain on a warning signal.

- :func:`job_end_time`: the scheduler's own end time where it tells (SLURM: ``squeue -o %e``,
  which follows ``scontrol update TimeLimit=``), an explicit ``HPCGPU_JOB_END`` (epoch
  seconds, for sites that know better), else now + the rendered walltime.
- :func:`lifetime_options`: Dask's ``--lifetime``/``--lifetime-stagger`` for that end time, so
  that Dask's own graceful retirement (``Worker.close_gracefully``: no new tasks, data moved to
  other workers, then exit) runs before the scheduler kills the job.
- :func:`install_drain`: SIGUSR1/SIGUSR2 (SLURM ``--signal``, SGE ``-notify``, LSF ``-wa``)
  drain the worker the same way instead of killing it (Python's default for USR1 is to die).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from datetime import datetime
from typing import Any, Mapping

from hpcgpu.jobspec.walltime import Retirement, retirement_off

__all__ = ["job_end_time", "lifetime_options", "install_drain", "forward_drain_to_children",
           "DRAIN_SIGNALS"]

logger = logging.getLogger("hpcgpu.worker")

#: Signals that mean "your job is about to end: drain".
DRAIN_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def _slurm_end(job_id: str) -> float | None:
    from hpcgpu.system import commands

    done = commands.run(["squeue", "-h", "-j", job_id, "-o", "%e"], timeout=15, check=False)
    text = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    try:
        return datetime.fromisoformat(text).timestamp()  # local time, as squeue prints it
    except ValueError:
        return None


def job_end_time(walltime: float, env: Mapping[str, str] | None = None,
                 now: float | None = None) -> tuple[float, str]:
    """Epoch seconds at which this process's job ends, and where that came from.

    Examples
    --------
    >>> job_end_time(600, env={"HPCGPU_JOB_END": "1000"}, now=10)
    (1000.0, 'HPCGPU_JOB_END')
    >>> job_end_time(600, env={}, now=10)
    (610.0, 'walltime 600 s from now')
    """
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    if env.get("HPCGPU_JOB_END"):
        return float(env["HPCGPU_JOB_END"]), "HPCGPU_JOB_END"
    if env.get("SLURM_JOB_ID"):
        try:
            end = _slurm_end(env["SLURM_JOB_ID"])
        except Exception:  # an unreachable controller must not stop the worker
            end = None
        if end is not None:
            return end, "squeue %e"
    return float(now + walltime), f"walltime {walltime:g} s from now"


def lifetime_options(walltime: float | None, retire_before: Any = None, stagger: Any = None,
                     extra: tuple[str, ...] = (), env: Mapping[str, str] | None = None,
                     now: float | None = None) -> list[str]:
    """``dask worker`` options that retire the worker before its job ends.

    Nothing when there is no walltime, ``retire_before`` is ``"off"``, or the user passed
    ``--lifetime`` already.

    Examples
    --------
    >>> lifetime_options(120, env={"HPCGPU_JOB_END": "1120"}, now=1000)
    ['--lifetime', '54s', '--lifetime-stagger', '6s']
    >>> lifetime_options(120, extra=("--lifetime", "5m"))
    []
    """
    if not walltime or retirement_off(retire_before) or any(
            a == "--lifetime" or a.startswith("--lifetime=") for a in extra):
        return []
    plan = Retirement.create(int(walltime), retire_before, stagger)
    end, source = job_end_time(float(walltime), env, now)
    now = time.time() if now is None else now
    life = plan.lifetime(end - now)
    logger.info("job ends at %s (%s): retiring after %.0f s +/- %.0f s",
                time.strftime("%H:%M:%S", time.localtime(end)), source, life, plan.stagger)
    return ["--lifetime", f"{life:.0f}s", "--lifetime-stagger", f"{plan.stagger:.0f}s"]


def install_drain(worker: Any) -> bool:
    """In the worker process: drain signals retire ``worker`` gracefully (once).

    Returns False where signals cannot be handled (not the main thread, e.g. a threaded
    LocalCluster).
    """
    loop = asyncio.get_running_loop()

    def drain() -> None:
        if getattr(worker, "_hpcgpu_draining", False):
            return
        worker._hpcgpu_draining = True
        logger.warning("drain signal: retiring worker %s (data moves to other workers)",
                       worker.name)
        asyncio.ensure_future(worker.close_gracefully(reason="hpcgpu-drain-signal"))

    try:
        for signum in DRAIN_SIGNALS:
            loop.add_signal_handler(signum, drain)
    except (RuntimeError, ValueError, NotImplementedError):
        return False
    return True


def forward_drain_to_children() -> None:
    """In the nanny process (the task the launcher started): pass drain signals on to the
    worker processes it spawned, and do not die of them."""
    def forward(signum: int, _frame: Any) -> None:
        from multiprocessing import forkserver

        import psutil

        # spawned workers run spawn_main; forked ones are children of the fork server
        # (Python's, or the one forked from this process, whose command line is this
        # one's); neither the server nor the resource tracker may get the signal
        server = forkserver._forkserver._forkserver_pid
        for child in psutil.Process().children(recursive=True):
            try:
                if (server is not None and child.ppid() == server) or \
                        "spawn_main" in " ".join(child.cmdline()):
                    child.send_signal(signum)
            except psutil.Error:
                pass

    for signum in DRAIN_SIGNALS:
        signal.signal(signum, forward)
