"""Before a worker starts: its interface exists on this host and the scheduler answers from here.

On a real site the workers run on other hosts than the scheduler: an interface only the login
host has, a scheduler address the compute hosts cannot route to, a firewall that drops the
scheduler's port. Dask reports each as a timeout after ``death_timeout`` (or a worker-thread
traceback); this check names the host, the address and the fix within seconds, as one
``NetworkCheckError:`` line that the cluster's failure report shows (see
:mod:`hpcgpu.worker.startfailure`). Messages and fixes: docs/sites.md.
"""

from __future__ import annotations

import errno
import socket
import ssl

__all__ = ["NetworkCheckError", "check_worker_network", "connect_problem", "host_interfaces",
           "interface_problem", "link_problem", "link_state"]

#: fixes named in the messages (docs/sites.md has them too)
INTERFACE_FIX = ("pass an interface every compute host has, e.g. interface={example!r} (or "
                 "worker_interface= for the workers alone); `hpcgpu doctor` on a compute host lists them")
ROUTE_FIX = ("start the scheduler on a network the compute hosts share: interface='ib0' (or "
             "scheduler_interface=) naming an interface whose network they are on; "
             "`hpcgpu doctor --local --scheduler-address ADDRESS` on a compute host shows which of its interfaces reach it")
PORT_FIX = ("open TCP port {port} on the scheduler's host to the compute hosts, or choose a port its "
            "firewall allows with scheduler_options={{'port': N}}; the workers' own ports, which the "
            "scheduler and client connect back to, are set with worker_extra_args=['--worker-port', "
            "'A:B', '--nanny-port', 'C:D']")


class NetworkCheckError(RuntimeError):
    """This worker cannot work with the scheduler from this host; the message has the fix."""


def host_interfaces() -> dict[str, list[str]]:
    """This host's interfaces and their IPv4 addresses (``{"ib0": ["10.78.0.11"], ...}``)."""
    import psutil

    return {name: [a.address for a in addrs if a.family == socket.AF_INET]
            for name, addrs in psutil.net_if_addrs().items()}


def _listing(interfaces: dict[str, list[str]]) -> str:
    return ", ".join(f"{name} {' '.join(addrs) or '(no IPv4 address)'}"
                     for name, addrs in sorted(interfaces.items()) if name != "lo") or "none but lo"


def interface_problem(interface: str | None, host: str, interfaces: dict[str, list[str]],
                      role: str = "", fix: str = INTERFACE_FIX) -> str | None:
    """Why ``interface`` cannot carry this worker (None when it can); ``role`` follows the
    host's name (", where the scheduler runs"), ``fix`` ends the message.

    Examples
    --------
    >>> ifs = {"lo": ["127.0.0.1"], "eth0": ["10.77.0.11"], "ib0": ["10.78.0.11"]}
    >>> interface_problem("ib0", "node1", ifs) is None
    True
    >>> print(interface_problem("ext0", "node1", ifs))  # doctest: +ELLIPSIS
    interface 'ext0' does not exist on host node1 (its interfaces: eth0 10.77.0.11, ib0 10.78.0.11): pass ...

    The fix's example is an interface the host has, never the one refused:

    >>> print(interface_problem("ib0", "vm", {"eth0": ["192.0.2.2"]}))  # doctest: +ELLIPSIS
    interface 'ib0' does not exist on host vm (its interfaces: eth0 192.0.2.2): pass an interface every compute host has, e.g. interface='eth0' ...
    """
    if interface is None:
        return None
    usable = sorted((name for name, addresses in interfaces.items()  # a fast network first
                     if addresses and name not in ("lo", interface)),
                    key=lambda name: (not name.startswith(("ib", "hsn")), name))
    fix = fix.format(example=usable[0] if usable else "ib0" if interface != "ib0" else "eth0")
    if interface not in interfaces:
        return (f"interface {interface!r} does not exist on host {host}{role} (its interfaces: "
                f"{_listing(interfaces)}): {fix}")
    if not interfaces[interface]:
        return (f"interface {interface!r} on host {host}{role} has no IPv4 address (its interfaces: "
                f"{_listing(interfaces)}): {fix}")
    return None


def link_state(interface: str, sys_root: str = "/sys") -> str | None:
    """The kernel's ``operstate`` of ``interface`` (``up``, ``down``, ``lowerlayerdown``,
    ``unknown``...), None where it cannot be read."""
    try:
        with open(f"{sys_root}/class/net/{interface}/operstate") as file:
            return file.read().strip().lower() or None
    except (OSError, ValueError):
        return None


def link_problem(interface: str | None, host: str, state: str | None) -> str | None:
    """Why ``interface`` carries nothing now: its link is down (``ip link set ib0 down``, a
    cable or switch port cut); None when it is up or its state is unknown.

    >>> print(link_problem("ib0", "node2", "down"))  # doctest: +ELLIPSIS
    interface 'ib0' on host node2 is down (link state down): this host lost its network; ...
    >>> link_problem("ib0", "node2", "up") is None, link_problem("ib0", "node2", "unknown") is None
    (True, True)
    """
    if interface is None or state not in ("down", "lowerlayerdown", "notpresent"):
        return None
    return (f"interface {interface!r} on host {host} is down (link state {state}): this host lost "
            f"its network; the cluster keeps its new jobs off host {host} (exclude_failed_hosts); "
            f"`ip link show {interface}` on {host} shows the link, which its administrators bring back")


def connect_problem(error: OSError, host: str, address: str, port: int, timeout: float,
                    interfaces: dict[str, list[str]]) -> str:
    """The message for a failed connection from ``host`` to the scheduler at ``address:port``.

    Examples
    --------
    >>> ifs = {"eth0": ["10.77.0.11"], "ib0": ["10.78.0.11"]}
    >>> unreachable = OSError(101, "Network is unreachable")
    >>> print(connect_problem(unreachable, "node1", "10.79.0.10", 8786, 5, ifs))  # doctest: +ELLIPSIS
    host node1 cannot reach the scheduler at 10.79.0.10:8786 (Network is unreachable; its networks: eth0 10.77.0.11, ib0 10.78.0.11): start the scheduler on a network ...
    >>> print(connect_problem(TimeoutError(), "node1", "10.78.0.10", 8786, 5, ifs))  # doctest: +ELLIPSIS
    host node1 got no answer from the scheduler at 10.78.0.10:8786 within 5 s (packets dropped, as a firewall does): open TCP port 8786 on ...
    """
    where = f"host {host}"
    target = f"the scheduler at {address}:{port}"
    code = getattr(error, "errno", None)
    if isinstance(error, (TimeoutError, socket.timeout)) or code == errno.ETIMEDOUT:
        return (f"{where} got no answer from {target} within {timeout:g} s (packets dropped, as a "
                f"firewall does): {PORT_FIX.format(port=port)}")
    if isinstance(error, socket.gaierror):
        return (f"{where} cannot resolve the scheduler's host name {address!r} ({error.strerror}): "
                f"give the scheduler an interface (interface='ib0') so that workers get its address, "
                f"or add the name to this host's resolver")
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return f"{where} cannot reach {target} ({reason}; its networks: {_listing(interfaces)}): {ROUTE_FIX}"


def _host_port(scheduler: str) -> tuple[str, int] | None:
    """The scheduler's host and port, parsed here: the check runs before the worker imports
    distributed (a second of CPU, several on a loaded node), so that its error comes sooner.

    Examples
    --------
    >>> _host_port("tls://10.78.0.10:8786"), _host_port("[fe80::1]:8786"), _host_port("inproc://x/1")
    (('10.78.0.10', 8786), ('fe80::1', 8786), None)
    """
    scheme, sep, location = scheduler.partition("://")
    if not sep:  # no scheme: distributed's default, TCP
        scheme, location = "tcp", scheduler
    if scheme not in ("tcp", "tls", "ucx", "ucxx"):  # inproc:// and the like: nothing to check
        return None
    host, _, port = location.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_worker_network(scheduler: str | None, interface: str | None, timeout: float = 5.0,
                         security_args: dict | None = None) -> None:
    """Raise :class:`NetworkCheckError` naming host, address and fix when ``interface`` is
    missing here or the scheduler's address does not answer from here within ``timeout`` s.

    ``security_args``: the worker's TLS files (``tls_ca_file``/``tls_cert``/``tls_key``), with
    which a ``tls://`` scheduler gets a complete handshake (a bare connection would make it log
    a failed one). Without a scheduler address (a scheduler file) only the interface is checked.
    """
    host, interfaces = socket.gethostname(), host_interfaces()
    if (problem := interface_problem(interface, host, interfaces)) is not None:
        raise NetworkCheckError(problem)
    if (problem := link_problem(interface, host, interface and link_state(interface))) is not None:
        raise NetworkCheckError(problem)  # not "pass interface=": it is given, and down here
    target = _host_port(scheduler) if scheduler else None
    if target is None:
        return
    address, port = target
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except ConnectionRefusedError:
        return  # reached, but not listening yet (a scheduler still starting): Dask waits for it
    except OSError as error:
        raise NetworkCheckError(connect_problem(error, host, address, port, timeout, interfaces)) from None
    with sock:  # reached: what follows is the scheduler's, not the network's
        context = _tls_context(scheduler, security_args)
        if context is None:
            return
        sock.settimeout(timeout)
        try:
            with context.wrap_socket(sock, server_hostname=None):
                pass
        except OSError:  # TLS trouble (Dask reports it in its own words), or a handshake that
            return       # a busy scheduler answers late (its event loop held 6 s once in CI)


def _tls_context(scheduler: str, args: dict | None) -> ssl.SSLContext | None:
    if not scheduler.startswith("tls://") or not args or not args.get("tls_cert"):
        return None
    context = ssl.create_default_context(cafile=args.get("tls_ca_file"))
    context.check_hostname = False
    context.load_cert_chain(args["tls_cert"], args.get("tls_key"))
    return context
