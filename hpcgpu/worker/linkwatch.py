"""While the workers run: say at once, in the job's log, when their interface's link goes down.

A host that loses its fast network (``ip link set ib0 down``, a cable or switch port cut)
keeps its job running: the workers' connections to the scheduler stall until a TCP timeout
(about 30 s) ends them, and nothing says why. A daemon thread of the worker command reads the
interface's link state every second and writes one ``NetworkCheckError:`` line (the words of
:func:`~hpcgpu.worker.reach.link_problem`) to standard error, the job's log, when it goes down,
and one line when it is back. The cluster shows the line as soon as the workers' heartbeats
stop (:mod:`hpcgpu.cluster.batch.silence`) and, once the job ends, keeps its replacement off
the host (:mod:`hpcgpu.cluster.batch.exclusions`).
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Callable

from hpcgpu.worker.reach import link_problem, link_state

__all__ = ["LinkWatch", "watch_link"]


class LinkWatch:
    """The lines to write as ``interface``'s state moves (pure: :meth:`seen` takes each
    reading).

    >>> watch = LinkWatch("ib0", "node2")
    >>> [watch.seen(s) for s in ("up", "up", "down", "down", "up")]  # doctest: +ELLIPSIS
    [None, None, "NetworkCheckError: interface 'ib0' on host node2 is down (link state down): ...", None, "interface 'ib0' on host node2 is up again"]
    """

    def __init__(self, interface: str, host: str) -> None:
        self.interface, self.host, self.down = interface, host, False

    def seen(self, state: str | None) -> str | None:
        problem = link_problem(self.interface, self.host, state)
        if problem is not None and not self.down:
            self.down = True
            return f"NetworkCheckError: {problem}"
        if problem is None and self.down and state is not None:
            self.down = False
            return f"interface {self.interface!r} on host {self.host} is up again"
        return None


def watch_link(interface: str | None, interval: float = 1.0,
               read: Callable[[str], str | None] = link_state) -> threading.Thread | None:
    """Start the daemon thread that watches ``interface`` (None: nothing to watch)."""
    if not interface or read(interface) is None:
        return None
    watch = LinkWatch(interface, socket.gethostname())
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            if (line := watch.seen(read(interface))) is not None:
                print(line, file=sys.stderr, flush=True)

    thread = threading.Thread(target=run, name="hpcgpu-link-watch", daemon=True)
    thread.stop = stop  # for tests
    thread.start()
    return thread
