"""From the scheduler's host to each new worker: its ports answer, or the user is told which to open.

In cluster mode the scheduler (in the cluster's process, on the login node) connects to the
workers' listening ports (to gather results, run functions, stop them through their
nannies), while each worker's own connection to the scheduler carries everything else. A
login node (or a firewall between) that drops those connections lets the workers join and
compute, then Dask's gather times out after 30 s per connection. So each new worker's and
nanny's address is connected to once (a TCP connection, then the TLS handshake with the
cluster's credentials where the address is ``tls://``: no failed handshake for the worker
to log); one that does not accept the connection within
:data:`PROBE_TIMEOUT` s becomes a message naming this host, the address, the port range to
open and the option that sets it (docs/sites.md). ``wait_for_workers`` counts a worker once
it answered, and raises with the messages.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

__all__ = ["PROBE_TIMEOUT", "ReachBack", "port_ranges", "reach_problem"]

logger = logging.getLogger("hpcgpu.cluster")

#: seconds a worker's port has to answer the scheduler's host
PROBE_TIMEOUT = 3.0
_OPTIONS = {"--worker-port": "worker", "--nanny-port": "nanny"}
RANDOM_FIX = ("the workers listen on random ports: fix them with worker_extra_args=['--worker-port', "
              "'9000:9100', '--nanny-port', '9100:9200'] (a range each: several workers share a node) "
              "and open those ranges from host {host} to the compute hosts")
ROUTE_FIX = ("the workers listen on a network this host has no route to: pass interface= (or "
             "worker_interface=) naming a network this host and the compute hosts share, e.g. "
             "interface='ib0'")


def port_ranges(extra_args: Sequence[str]) -> dict[str, str]:
    """The workers' and nannies' ports given in ``worker_extra_args`` (``"A:B"`` shown ``A-B``).

    Examples
    --------
    >>> port_ranges(["--worker-port", "9000:9100", "--nanny-port=9100:9200", "--lifetime", "5m"])
    {'worker': '9000-9100', 'nanny': '9100-9200'}
    >>> port_ranges([])
    {}
    """
    found, args = {}, [str(a) for a in extra_args]
    for i, arg in enumerate(args):
        option, _, value = arg.partition("=")
        if option in _OPTIONS and (value or i + 1 < len(args)):
            found[_OPTIONS[option]] = (value or args[i + 1]).replace(":", "-")
    return found


def _open_fix(host: str, ranges: dict[str, str]) -> str:
    if not ranges:
        return RANDOM_FIX.format(host=host)
    given = " and ".join(f"{ports} (--{role}-port)" for role, ports in ranges.items())
    return (f"open TCP ports {given} from host {host} to the compute hosts, or choose ranges its "
            "firewall allows with worker_extra_args=['--worker-port', 'A:B', '--nanny-port', 'C:D']")


def reach_problem(error: BaseException, host: str, what: str, address: str,
                  ranges: dict[str, str], timeout: float = PROBE_TIMEOUT) -> str | None:
    """The message for ``address`` (``what``: "worker 'x'", "the nanny of worker 'x'") not
    answering from ``host``; None when it refused the connection (it has just closed).

    Examples
    --------
    >>> print(reach_problem(TimeoutError(), "login", "worker 'w-0'", "tls://10.78.0.11:9000",
    ...                     {"worker": "9000-9100"}))  # doctest: +NORMALIZE_WHITESPACE
    host login got no answer from worker 'w-0' at tls://10.78.0.11:9000 within 3 s (packets
    dropped, as a firewall does): the scheduler and client connect to the workers' ports; open
    TCP ports 9000-9100 (--worker-port) from host login to the compute hosts, or choose ranges
    its firewall allows with worker_extra_args=['--worker-port', 'A:B', '--nanny-port', 'C:D']
    >>> reach_problem(ConnectionRefusedError(), "login", "worker 'w-0'", "tls://10.78.0.11:9000", {}) is None
    True
    """
    causes = []
    while error is not None and len(causes) < 8:
        causes.append(error)
        error = error.__cause__ or error.__context__
    if any(isinstance(e, ConnectionRefusedError) for e in causes):
        return None
    unreachable = [e for e in causes if getattr(e, "errno", None) in (errno.ENETUNREACH, errno.EHOSTUNREACH)]
    if unreachable:
        return (f"host {host} cannot reach {what} at {address} ({unreachable[0].strerror}): "
                f"{ROUTE_FIX}")
    return (f"host {host} got no answer from {what} at {address} within {timeout:g} s (packets "
            f"dropped, as a firewall does): the scheduler and client connect to the workers' ports; "
            f"{_open_fix(host, ranges)}")


def _connect(host: str, port: int, timeout: float) -> socket.socket | OSError:
    """A TCP connection, or the error: blocking, in a thread, so that the kernel times it.
    An asyncio timeout is the event loop's: a loop held past it (a loaded login node, a long
    callback) would fire it after the port had answered."""
    try:
        return socket.create_connection((host, port), timeout)
    except OSError as error:  # TimeoutError included
        return error


async def _answers(address: str, connection_args: dict, timeout: float,
                   executor: ThreadPoolExecutor | None = None) -> BaseException | None:
    """None when ``address`` accepts a TCP connection within ``timeout`` s, else the error.

    The connection is the kernel's answer, not the worker's event loop's (a worker busy with
    a task still answers). A TLS address then gets a complete TLS handshake before the
    close, so the worker logs no failed handshake (only, at INFO, a connection closed before
    Dask's own handshake)."""
    from distributed.comm import parse_address, parse_host_port

    scheme, location = parse_address(address)
    host, port = parse_host_port(location)
    sock = await asyncio.get_running_loop().run_in_executor(executor, _connect, host, port, timeout)
    if isinstance(sock, OSError):
        return sock
    writer = None
    try:
        sock.setblocking(False)
        _, writer = await asyncio.open_connection(sock=sock)
        context = connection_args.get("ssl_context")
        if scheme == "tls" and context is not None:
            await asyncio.wait_for(writer.start_tls(context), timeout)
    except (OSError, ValueError):  # reached: TLS trouble is Dask's to report, in its words
        pass
    finally:
        if writer is None:
            sock.close()
        else:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), timeout)
            except (OSError, ValueError):  # TimeoutError included: nothing more to learn
                pass
    return None


class ReachBack:
    """Each new worker's and nanny's address, connected to once from this process.

    Parameters
    ----------
    connection_args : callable
        () -> the cluster's client credentials (``Security.get_connection_args("client")``).
    describe : callable
        (worker info) -> (the worker's words for messages, its pool's ``port_ranges``).
    """

    def __init__(self, connection_args: Callable[[], dict], describe: Callable[[dict], tuple[str, dict]],
                 timeout: float = PROBE_TIMEOUT) -> None:
        self.connection_args, self.describe, self.timeout = connection_args, describe, timeout
        #: messages of the workers this host cannot reach, one per worker
        self.problems: list[str] = []
        #: addresses of the workers that did not answer (closed by the scheduler, not their nannies)
        self.failed: set[str] = set()
        self._answered: set[str] = set()
        self._probes = itertools.count()
        # address -> the probe of the worker there now; a probe no longer listed is of a worker
        # that left meanwhile (or whose address a new worker took: fixed ports)
        self._probing: dict[str, int] = {}
        self._tasks: set[asyncio.Task] = set()
        self.host = socket.gethostname()
        # its own threads: a firewall's dropped connections hold one each for ``timeout`` s,
        # and the loop's default pool also runs the cluster's job-status polls
        self._executor = ThreadPoolExecutor(16, thread_name_prefix="hpcgpu-reach")

    def watch(self, workers: dict[str, dict]) -> None:
        """Probe the workers just added (address -> the scheduler's info on it)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the cluster's loop (a test's direct call): nothing to run on
            loop = None
        for address, info in workers.items():
            if loop is None or not address.startswith(("tcp://", "tls://")):  # UCX, inproc: not checked
                self._answered.add(address)
                continue
            probe = self._probing[address] = next(self._probes)
            task = loop.create_task(self._probe(address, info, probe))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def left(self, address: str) -> None:
        """The worker at ``address`` left the scheduler: a probe of it that fails says nothing
        about the network (a worker killed mid-probe, e.g. by its nanny in a restart storm)."""
        self._probing.pop(address, None)

    def answered(self, address: str) -> bool:
        """Whether the worker at ``address`` (and its nanny) answered from here."""
        return address in self._answered

    async def _probe(self, address: str, info: dict, probe: int) -> None:
        try:
            what, ranges = self.describe(info)
            targets = [(what, address)] + ([(f"the nanny of {what}", info["nanny"])]
                                           if info.get("nanny") else [])
            args = self.connection_args()
            errors = await asyncio.gather(*(_answers(a, args, self.timeout, self._executor)
                                            for _, a in targets))
            problems = [reach_problem(e, self.host, w, a, ranges, self.timeout)
                        for (w, a), e in zip(targets, errors) if e is not None]
            problems = [p for p in problems if p]
        except Exception as error:  # never block a worker on the check's own failure
            logger.debug("reach-back check of %s failed: %r", address, error)
            problems = []
        current = self._probing.get(address) == probe
        if problems and not current:
            logger.debug("reach-back check of %s: it left meanwhile (%s)", address, problems[0])
        elif problems:
            self.failed.add(address)
            self.problems.append(problems[0])
            logger.error("%s", problems[0])
        else:
            self._answered.add(address)
        if current:
            del self._probing[address]

    def close(self) -> None:
        """Cancel the probes in flight and end the probing threads (the cluster closes)."""
        for task in list(self._tasks):
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

