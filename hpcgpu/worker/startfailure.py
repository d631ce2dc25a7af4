"""A worker that cannot start is reported at once, with the first lines of its own error.

``python -m hpcgpu.worker`` exits within a second when a nanny's worker fails in its
constructor ("PinnedNanny failed to start"); whoever waits for its workers must watch that
process rather than wait until a timeout (a benchmark waited 110 s on a 4 x H200 host).

A nanny restarts its worker whenever the worker process dies: with too little memory, a
preload that crashes or a GPU that faults, that is hundreds of restarts a minute while the
job shows ``running``. :func:`with_restart_limit` makes a nanny give up after
:data:`RESTART_LIMIT` exits within :data:`RESTART_WINDOW` seconds, with a
:data:`STORM_MARK` line that the cluster reports as a start failure (:func:`storm_lines`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import time
from collections import deque
from collections.abc import Callable

__all__ = ["WorkerStartError", "OneStartAtATime", "StopsWhileStarting", "exception_lines", "start_error",
           "wait_for_workers_or_exit", "with_restart_limit", "storm_lines", "RestartCounter", "STORM_MARK"]

logger = logging.getLogger("hpcgpu.worker")

#: worker exits within RESTART_WINDOW seconds after which its nanny stops restarting it
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0
#: the first words of the nanny's last line when it gives up (what the cluster looks for)
STORM_MARK = "WorkerRestartStormError"

# "MemoryError: std::bad_alloc: ...", "RuntimeError: PinnedNanny failed to start."
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Failure)\b:?.*")


class WorkerStartError(RuntimeError):
    """Workers exited before they connected; the message holds their own error."""


def start_error(log: str, lines: int = 5) -> str:
    """The first distinct exception lines of a worker's log (its own words), else its last lines.

    Examples
    --------
    >>> log = '''distributed.nanny - ERROR - Failed to initialize worker
    ... Traceback (most recent call last):
    ...   File "x.py", line 1, in <module>
    ... MemoryError: std::bad_alloc: out_of_memory: RMM failure: Maximum pool size exceeded
    ... RuntimeError: Nanny failed to start worker process
    ... RuntimeError: PinnedNanny failed to start.'''
    >>> print(start_error(log, lines=2))
    MemoryError: std::bad_alloc: out_of_memory: RMM failure: Maximum pool size exceeded
    RuntimeError: Nanny failed to start worker process
    >>> start_error("just\\nsome output")
    'just\\nsome output'
    """
    found = exception_lines(log, lines)
    return "\n".join(found or log.strip().splitlines()[-lines:])


def exception_lines(log: str, lines: int = 5) -> list[str]:
    """The first ``lines`` distinct exception lines of ``log`` (``[]`` when there is none).

    Examples
    --------
    >>> exception_lines("x\\nValueError: bad GPU\\n  File y\\nValueError: bad GPU\\nOSError: gone")
    ['ValueError: bad GPU', 'OSError: gone']
    """
    found: list[str] = []
    for line in log.splitlines():
        line = line.strip()
        if _EXCEPTION_LINE.match(line) and line not in found:
            found.append(line)
            if len(found) == lines:
                break
    return found


def wait_for_workers_or_exit(count: Callable[[], int], expected: int, exit_code: Callable[[], int | None],
                             log: Callable[[], str], timeout: float, poll: float = 0.25) -> int:
    """Wait until ``count()`` reaches ``expected``; raise at once if the workers' process exits.

    ``exit_code()`` is the worker process's exit code or None while it runs; ``log()`` its
    output so far. Raises :class:`WorkerStartError` (with :func:`start_error` of the log)
    when it exits first, :class:`TimeoutError` after ``timeout`` s.

    Examples
    --------
    >>> wait_for_workers_or_exit(lambda: 0, 2, lambda: 1, lambda: "ValueError: bad GPU", 60)
    Traceback (most recent call last):
    ...
    hpcgpu.worker.startfailure.WorkerStartError: the workers exited with code 1 after 0 of 2 connected:
    ValueError: bad GPU
    """
    deadline = time.monotonic() + timeout
    while (n := count()) < expected:
        code = exit_code()
        if code is not None:
            raise WorkerStartError(f"the workers exited with code {code} after {n} of {expected} "
                                   f"connected:\n{start_error(log())}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {n} of {expected} workers connected within {timeout:g} s")
        time.sleep(poll)
    return n


class RestartCounter:
    """Exit times of one worker; :meth:`exited` says when there were too many.

    Examples
    --------
    >>> counter = RestartCounter(limit=3, window=10)
    >>> [counter.exited(t) for t in (0, 1, 20, 21, 22)]
    [False, False, False, False, True]
    """

    def __init__(self, limit: int = RESTART_LIMIT, window: float = RESTART_WINDOW):
        self.limit, self.window, self.times = limit, window, deque()

    def exited(self, now: float) -> bool:
        self.times.append(now)
        while now - self.times[0] > self.window:
            self.times.popleft()
        return len(self.times) >= self.limit


class OneStartAtATime:
    """A mixin for a ``distributed.Nanny``: a start of its worker process waits until the one
    before it has ended.

    distributed's start polls its queue for the worker's "started" message until its status
    leaves ``starting``. A worker that dies after it connected but before that message was
    read is started again at once (``Nanny._on_worker_exit``), often before the first start
    looks again: both then poll the new start's queue, and where the first reads the message
    it drops it (another start's). The worker process runs, but its nanny waits for ever, and
    so does every close of the nanny or of its cluster. Here the first start, which sees the
    status ``stopped`` at its next look, returns before the next one begins; a start that
    waited for it does not begin where the nanny was closed meanwhile.
    """

    async def instantiate(self):
        lock = self.__dict__.setdefault("_hpcgpu_start_lock", asyncio.Lock())
        waited = lock.locked()
        async with lock:
            if waited and self.status.name in ("closing", "closed"):
                return self.status
            return await super().instantiate()


class StopsWhileStarting:
    """A mixin for a ``distributed.Nanny`` that is stopped while its worker process starts.

    distributed's kill waits until a start under way has ended: for a worker whose scheduler
    is gone (rank 0 of an MPI job killed by ``MPI_Abort``, a scheduler job that ended), that
    is the worker's death timeout, 60 s and more, after which the nanny's close ends in an
    ``AssertionError`` traceback; the command, told to stop by SIGTERM, outlives its job. A
    worker that has not started holds nothing to hand over: here it is killed at once, and
    the nanny's own start, which that ends, is no failure.

    A worker process that could not even be created (``OSError`` from multiprocessing: a
    fork server that cannot start, no memory to fork): distributed's close joins it, the join
    raises ("can only join a started process"), the nanny stays ``closing`` and whoever awaits
    it waits for ever with the error already logged. Here the close finds nothing to stop.
    """

    async def kill(self, timeout: float = 5, reason: str = "nanny-kill") -> None:
        process = getattr(self, "process", None)  # distributed's WorkerProcess
        while process is not None and process.status.name == "starting" and not process.running.is_set():
            child = getattr(process, "process", None)  # its AsyncProcess, once it exists
            if getattr(child, "pid", None) is not None:
                logger.info("worker %s stopped while it started (%s)", self.name, reason)
                self.__dict__["_hpcgpu_stopped_starting"] = True
                await child.kill()
                await process.running.wait()  # the start sees the exit and ends
            else:
                await asyncio.sleep(0.05)
        if process is not None and process.status.name in ("starting", "failed") \
                and getattr(getattr(process, "process", None), "pid", None) is None:
            self.process = None  # never started: nothing to stop or join
            return
        await super().kill(timeout=timeout, reason=reason)

    async def start_unsafe(self):
        try:
            return await super().start_unsafe()
        except RuntimeError:  # "Nanny failed to start worker process"
            if not self.__dict__.get("_hpcgpu_stopped_starting"):
                raise
            return self  # stopped as asked while it started: no failure, no traceback


def with_restart_limit(nanny_class: type) -> type:
    """A subclass of ``nanny_class`` (a ``distributed.Nanny``) that closes itself, instead of
    restarting its worker again, once the worker exited :data:`RESTART_LIMIT` times within
    :data:`RESTART_WINDOW` s (its last line starts with :data:`STORM_MARK`), or as soon as
    the worker died of SIGTERM (what a batch system sends every process of a job it stops)."""

    class LimitedNanny(OneStartAtATime, StopsWhileStarting, nanny_class):
        def _on_worker_exit_sync(self, exitcode):
            # before anything reads them: the exit code, and whether this nanny's own memory
            # monitor sent the SIGTERM (it notes the pid it terminates)
            memory_pid = getattr(getattr(self, "memory_manager", None), "_last_terminated_pid", -1)
            by_memory = memory_pid not in (-1, None, self.__dict__.get("_hpcgpu_memory_pid"))
            self.__dict__.update(_hpcgpu_exitcode=exitcode, _hpcgpu_memory_pid=memory_pid,
                                 _hpcgpu_by_memory=by_memory)
            super()._on_worker_exit_sync(exitcode)

        def _stopped_by_sigterm(self) -> bool:
            # the batch system stops the job (scancel, qdel, the walltime): it signals every
            # process of the job, this nanny too; a worker restarted meanwhile, or a start
            # that fails, ended in tracebacks in the job's log
            if self.__dict__.get("_hpcgpu_exitcode") != -signal.SIGTERM or self.__dict__.get("_hpcgpu_by_memory"):
                return False
            logger.info("worker %s stopped by SIGTERM: its nanny closes too", self.name)
            return True

        async def start_unsafe(self):
            try:
                return await super().start_unsafe()
            except RuntimeError:  # distributed has closed the nanny already
                if not self._stopped_by_sigterm():
                    raise
                return self

        async def _on_worker_exit(self, exitcode):
            if self.status.name == "running" and self._stopped_by_sigterm():
                await self.close(reason="hpcgpu-worker-sigterm")
                return
            counter = self.__dict__.setdefault("_hpcgpu_exits", RestartCounter())
            if self.status.name == "running" and counter.exited(time.monotonic()):
                logger.error("%s: worker %s exited %d times within %g s (last exit code %s); "
                             "not restarting it: the lines before say why", STORM_MARK,
                             self.name, len(counter.times), counter.window, exitcode)
                await self.close(reason="hpcgpu-restart-storm")
                return
            await super()._on_worker_exit(exitcode)

    LimitedNanny.__name__ = LimitedNanny.__qualname__ = nanny_class.__name__
    return LimitedNanny


_LOG_LINE = re.compile(r"^[\d\- :,]*- ([\w.]+) - (WARNING|ERROR|CRITICAL) - (.*)$")


def storm_lines(log: str, lines: int = 5) -> list[str]:
    """For a log with a restart storm: its distinct warnings and errors (the worker's and its
    nanny's own words, such as the memory budget it exceeded), the storm line last; else ``[]``.

    Examples
    --------
    >>> budget = "1 - distributed.nanny.memory - WARNING - Worker exceeded 95% memory budget."
    >>> log = "\\n".join([budget, budget, f"2 - hpcgpu.worker - ERROR - {STORM_MARK}: worker j-0-0 exited"])
    >>> storm_lines(log)
    ['Worker exceeded 95% memory budget.', 'WorkerRestartStormError: worker j-0-0 exited']
    >>> storm_lines(budget)
    []
    """
    if STORM_MARK not in log:
        return []
    found: dict[str, str] = {}  # by the line with its numbers (pid, port) left out
    for line in log.splitlines():
        match = _LOG_LINE.match(line.strip())
        text = match.group(3).strip() if match else ""
        if text and not text.startswith(("Restarting worker", STORM_MARK)):
            found.setdefault(re.sub(r"\d+", "#", text), text)
    storm = next(line[line.index(STORM_MARK):] for line in log.splitlines() if STORM_MARK in line)
    return list(found.values())[:lines - 1] + [storm]
