"""A clean end, whatever the end: a cluster's jobs are cancelled when its process ends.

``cluster.close()`` retires the workers and cancels the jobs. Without it, every way a
process can end still cancels every job the cluster submitted, pending or running:

- the script falls off its end, or dies of an uncaught exception: the cluster is closed
  by a hook of :mod:`threading`'s exit (:func:`close_at_exit`), which runs before ``atexit``
  and before :mod:`concurrent.futures` refuses work (``asyncio.to_thread`` in the cluster's
  loop would raise "cannot schedule new futures after interpreter shutdown"), while the
  worker processes and the loop's thread still run; then the jobs left are cancelled;
- the cluster is garbage-collected: the same finalizer;
- ``SIGTERM`` or ``SIGHUP`` with Python's default handler (death): the jobs are cancelled,
  then the process dies of the same signal, as it would have without hpcgpu.

Only the process that made a cluster closes it or cancels its jobs: a process forked from it
inherits these hooks and the handler, and its SIGTERM or its end leaves the jobs alone.

The cancel is synchronous, through :func:`hpcgpu.system.commands.run`: at interpreter shutdown
the thread pool behind ``asyncio.to_thread`` no longer accepts work. After ``SIGKILL``
nothing runs in this process: the workers end themselves when the scheduler connection
breaks (or, for a job that starts later, after ``death_timeout``), see docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import threading
import time
import weakref
from typing import Any

from distributed.core import Status

from hpcgpu.system import commands
from hpcgpu.worker.nannies import stop_through_nannies

__all__ = ["close_at_exit", "cancel_now", "end_workers", "scheduler_gone", "SCHEDULER_ANSWER", "wait_until_ended", "watch", "HANDLED_SIGNALS", "END_GRACE"]

logger = logging.getLogger("hpcgpu.cluster")

#: Signals whose default action (death) is preceded by cancelling the jobs.
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Seconds ``close`` waits for stopped workers' jobs to end by themselves before cancelling.
END_GRACE = 10.0
_finalizers: list[weakref.finalize] = []
#: cluster -> the pid of the process that made it: a forked child (a ``multiprocessing`` fork
#: worker) inherits these hooks and handlers, and must neither close nor cancel its parent's
_clusters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_installed: set = set()  # signal numbers, and "atexit"


def cancel_now(dialect: Any, jobs: dict[str, Any]) -> list[str]:
    """Cancel every job of ``jobs`` (name -> :class:`~hpcgpu.cluster.GPUJob`) that has an
    id and has not ended, with one cancel command; never raises. Returns the ids.

    Examples
    --------
    >>> from types import SimpleNamespace as Job
    >>> from hpcgpu.jobspec.dialects import get_dialect
    >>> from hpcgpu.system.commands import CommandResult, set_runner
    >>> ran = []
    >>> set_runner(lambda argv, timeout, input: ran.append(argv) or
    ...            CommandResult(tuple(argv), 0, "", ""))
    >>> jobs = {"a": Job(job_id="7", ended=False), "b": Job(job_id="8", ended=True)}
    >>> cancel_now(get_dialect("slurm"), jobs), ran, jobs["a"].ended
    (['7'], [['scancel', '7']], True)
    >>> cancel_now(get_dialect("slurm"), jobs), len(ran)  # nothing left to cancel
    ([], 1)
    >>> set_runner(None)
    """
    ids = [job.job_id for job in list(jobs.values())
           if getattr(job, "job_id", None) and not getattr(job, "ended", False)]
    for start in range(0, len(ids), 500):  # keep the command line short
        chunk = ids[start:start + 500]
        try:
            done = commands.run(dialect.cancel_argv(chunk), timeout=60, check=False)
        except Exception as error:  # at exit: say it, never a traceback
            logger.warning("cancelling job(s) %s failed: %s", " ".join(chunk), error)
            continue
        if done.returncode != 0:
            logger.warning("%s", commands.CommandError(done))
    for job in list(jobs.values()):
        if getattr(job, "job_id", None) in ids:
            job.ended = True  # GPUJob.close and cancel_together have nothing left to do
    return ids


def watch(cluster: Any, dialect: Any, jobs: dict[str, Any],
          private: Any = None) -> weakref.finalize:
    """Cancel ``jobs``, then remove the ``private`` directory
    (:class:`~hpcgpu.cluster.batch.private.PrivateDirectory`: the credentials), when ``cluster``
    is collected, at interpreter exit, or on a deadly signal, whichever comes first (once).
    ``jobs`` and ``private`` must not refer to ``cluster``."""
    finalizer = weakref.finalize(cluster, _end, os.getpid(), dialect, jobs, private)
    close_at_exit(cluster)
    _finalizers[:] = [f for f in _finalizers if f.alive] + [finalizer]
    _install_signal_handlers()
    return finalizer


def close_at_exit(cluster: Any) -> None:
    """Close ``cluster`` (a synchronous one, not closed yet) when the script ends without
    closing it: before the interpreter shuts down, so that it closes as ``cluster.close()``
    would, without tracebacks."""
    _clusters[cluster] = os.getpid()
    if "atexit" in _installed:
        return
    try:
        # threading's exit hooks run first: the thread pools still take work, the nannies'
        # processes and the loop's thread still run (atexit comes after all of them)
        threading._register_atexit(_at_exit)
    except (AttributeError, RuntimeError):  # another Python, or already shutting down
        atexit.register(_at_exit)
    _installed.add("atexit")


def _end(owner: int, dialect: Any, jobs: dict[str, Any], private: Any) -> None:
    if os.getpid() != owner:  # a forked child ends (its SIGTERM, its exit): not its jobs
        return
    cancel_now(dialect, jobs)
    if private is not None:
        private.remove()


def _run_finalizers() -> None:
    for finalizer in list(_finalizers):
        finalizer()


def _at_exit() -> None:
    """Close what the script left open (the nannies stop their workers, the jobs end
    cleanly), then cancel whatever is left. Only clusters on hpcgpu's own loop: a user's loop is gone by now."""
    for cluster, owner in list(_clusters.items()):
        if owner != os.getpid() or getattr(cluster, "asynchronous", True) or cluster.status == Status.closed:
            continue
        try:
            cluster.close(timeout=2 * END_GRACE + 10)
        except BaseException as error:  # at exit: say it, never a traceback
            logger.warning("closing %s at exit: %r; cancelling its jobs", cluster._name, error)
    _run_finalizers()


def _install_signal_handlers() -> None:
    """Only where Python's default (die at once) is in place, and only from the main
    thread (Python's rule): a handler the user installed is theirs."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in HANDLED_SIGNALS:
        if signum in _installed:
            continue
        try:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _cancel_then_die)
                _installed.add(signum)
        except (ValueError, OSError):  # not the main interpreter
            pass


def _cancel_then_die(signum: int, _frame: Any) -> None:
    _run_finalizers()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # die of the same signal, as without hpcgpu


#: seconds a scheduler has to answer at close before it counts as gone (distributed's
#: connect timeout, 30 s, retries a refused connection until it ends)
SCHEDULER_ANSWER = 5.0


def scheduler_gone(cluster: Any) -> bool:
    """Whether the cluster's own scheduler object has stopped (closed or failed)."""
    status = getattr(cluster.scheduler, "status", None)
    return status in (Status.closing, Status.closed, Status.failed)


async def end_workers(cluster: Any, grace: float = END_GRACE) -> None:
    """Stop every connected worker through its nanny
    (:func:`~hpcgpu.worker.nannies.stop_through_nannies`), and wait up to ``grace`` s for
    their jobs to leave the queue: a job cancelled while its workers close logs their
    broken connections as tracebacks."""
    identity = await asyncio.wait_for(cluster.scheduler_comm.identity(), SCHEDULER_ANSWER)
    workers = identity.get("workers", {})
    if not workers:
        return
    # --no-nanny, or a nanny this host cannot reach (hpcgpu.cluster.batch.reachback): the
    # scheduler closes it
    failed = cluster.reach.failed if getattr(cluster, "reach", None) is not None else set()
    nannies = [a for a, w in workers.items() if w.get("nanny") and a not in failed]
    alone = [a for a in workers if a not in nannies]
    if nannies:
        args = cluster.security.get_connection_args("client") if cluster.security else {}
        await stop_through_nannies([workers[a]["nanny"] for a in nannies], args)
    if alone:
        await cluster.scheduler_comm.retire_workers(workers=alone, close_workers=True)
    names = {cluster.job_key(str(w.get("name"))) for w in workers.values()}
    jobs = [cluster.workers[name] for name in names if name in cluster.workers]
    await wait_until_ended(cluster._dialect, jobs, grace)


async def wait_until_ended(dialect: Any, jobs: list, grace: float) -> None:
    """Poll (synchronously, like every call on the way out) until ``jobs`` have left the
    queue or ``grace`` s have passed; mark those that did as ended (nothing to cancel).
    Without the status command (not on PATH) there is nothing to see: it returns at once."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        live = [job for job in jobs if job.job_id and not getattr(job, "ended", False)]
        if not live:
            return
        done = commands.run(dialect.status_argv(sorted(j.job_id for j in live)), timeout=30,
                            check=False)
        if done.returncode == 127:  # no status command here: nothing to wait on (the cancel says why)
            logger.warning("%s", commands.CommandError(done))
            return
        if done.returncode == 0:
            statuses = dialect.parse_status(done.stdout)
            for job in live:
                status = statuses.get(job.job_id)
                if status is None or status.finished or status.state == "completing":
                    job.ended = True
        await asyncio.sleep(0.25)
