"""Stop signals go to the main thread: every thread hpcgpu starts blocks them.

Python runs a signal handler in the main thread only. The kernel hands a signal sent to the
process to any thread that does not block it; when that is another thread (it happens when
the main thread already has a signal pending), the main thread sleeping in ``read()`` or
``wait()`` is not woken, and the handler (hpcgpu's clean-up on SIGTERM, the forwarding of
``hpcgpu run``, ``KeyboardInterrupt``) waits until that call returns, possibly for ever.

So a thread that hpcgpu starts is born with :data:`MAIN_THREAD_SIGNALS` blocked (a thread
inherits the mask of the thread that starts it, so the threads *it* starts, thread pools
included, block them too), and only the main thread is left to take them. A child process
inherits the mask of the thread that forks it across ``exec`` as well: whatever hpcgpu
starts from such a thread unblocks them in the child (:func:`preexec`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator

__all__ = ["MAIN_THREAD_SIGNALS", "block_here", "born_blocked", "start_thread", "blocked_here", "preexec",
           "unblock_in_child", "unblock_in_main"]

#: The signals hpcgpu handles: stop (TERM, INT, HUP) and walltime warnings (USR1, USR2).
MAIN_THREAD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                 signal.SIGUSR1, signal.SIGUSR2})


def block_here() -> None:
    """Block :data:`MAIN_THREAD_SIGNALS` in the calling thread, unless it is the main one
    (for a thread that another library started: the earlier the better)."""
    if threading.current_thread() is not threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)


def blocked_here() -> bool:
    """Whether the calling thread blocks any of :data:`MAIN_THREAD_SIGNALS`.

    Examples
    --------
    >>> blocked_here()
    False
    >>> with born_blocked():
    ...     blocked_here()
    True
    """
    return bool(signal.pthread_sigmask(signal.SIG_BLOCK, ()) & MAIN_THREAD_SIGNALS)


@contextlib.contextmanager
def born_blocked() -> Iterator[None]:
    """Threads started inside the block are born with :data:`MAIN_THREAD_SIGNALS`
    blocked: no moment in which the kernel could pick them. The calling thread blocks
    them meanwhile (a signal that comes then waits, and is delivered at the block's end)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_thread(thread: threading.Thread) -> threading.Thread:
    """``thread.start()``, the thread born with :data:`MAIN_THREAD_SIGNALS` blocked.

    Examples
    --------
    >>> seen = []
    >>> start_thread(threading.Thread(target=lambda: seen.append(blocked_here()))).join()
    >>> seen
    [True]
    """
    with born_blocked():
        thread.start()
    return thread


def unblock_in_main() -> None:
    """Take the stop signals back in the main thread of a process that a blocking thread
    started without :func:`preexec` (a nanny's worker process, forked or spawned by
    ``multiprocessing``): its other threads keep them blocked."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, MAIN_THREAD_SIGNALS)


def unblock_in_child() -> None:
    """Undo the block in a child process before it execs (a ``preexec_fn``).

    First the parent's Python handlers of these signals go back to the default, while the
    signals are still blocked: the child runs Python until its ``exec``, and a signal that
    arrives there (the parent's death signal, when the parent is killed at that moment)
    would run the parent's handler in the child: a user's, say (hpcgpu's own acts only in
    the process that made its clusters, :mod:`hpcgpu.cluster.shutdown`). A signal the parent
    ignores stays ignored, as across ``exec``.
    """
    for signum in MAIN_THREAD_SIGNALS:
        if callable(signal.getsignal(signum)):
            signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, MAIN_THREAD_SIGNALS)


def preexec() -> Callable[[], None] | None:
    """``preexec_fn`` for a child started from this thread: :func:`unblock_in_child` where
    this thread blocks the signals, None (the faster ``vfork``) where it does not."""
    return unblock_in_child if blocked_here() else None
