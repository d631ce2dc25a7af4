"""A worker that cannot start is reported at once, with the first lines of its own error.

``python -m hpcgpu.worker`` exits within a second when a nanny's worker fails in its
constructor ("PinnedNanny failed to start"); whoever waits for its workers must watch that
process rather than wait until a timeout (a benchmark waited 110 s on a 4 x H200 host).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

__all__ = ["WorkerStartError", "exception_lines", "start_error", "wait_for_workers_or_exit"]

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
