"""Where the dashboard of a batch run listens, and how its user reaches it.

The dashboard has no password: by default it listens on this node's loopback address
only, as cluster mode's does, and the job's log says how to reach it through ``ssh -L``.
Another address (``--dashboard-address :8787`` for every interface) is the user's choice.
"""

from __future__ import annotations

import socket

__all__ = ["DEFAULT_DASHBOARD", "dashboard_message", "is_loopback", "scheduler_dashboard_message"]

#: The dashboard's default address (distributed takes another port when 8787 is in use).
DEFAULT_DASHBOARD = "127.0.0.1:8787"


def is_loopback(address: str) -> bool:
    """Whether a ``host:port`` dashboard address listens on loopback only.

    Examples
    --------
    >>> is_loopback("127.0.0.1:8787"), is_loopback("localhost:0"), is_loopback(":8787")
    (True, True, False)
    """
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def dashboard_message(address: str, port: int, host: str | None = None) -> str:
    """What the log says about the dashboard listening on ``port`` (asked for as ``address``).

    Examples
    --------
    >>> dashboard_message("127.0.0.1:8787", 8787, "node3")  # doctest: +NORMALIZE_WHITESPACE
    'dashboard on 127.0.0.1:8787 of node3 (this node only); from your own machine:
     ssh -L 8787:localhost:8787 node3, then open http://localhost:8787/status'
    >>> dashboard_message(":8787", 8790, "node3")
    'dashboard on port 8790 of node3, every interface (no password): http://node3:8790/status'
    """
    host = host or socket.gethostname()
    if is_loopback(address):
        return (f"dashboard on 127.0.0.1:{port} of {host} (this node only); from your own machine: "
                f"ssh -L {port}:localhost:{port} {host}, then open http://localhost:{port}/status")
    bind = address.rsplit(":", 1)[0].strip("[]")
    if bind in ("", "0.0.0.0", "::"):
        return (f"dashboard on port {port} of {host}, every interface (no password): "
                f"http://{host}:{port}/status")
    return f"dashboard on {bind}:{port} (no password): http://{bind}:{port}/status"


def scheduler_dashboard_message(scheduler, address: str | None) -> str | None:
    """:func:`dashboard_message` for an in-process ``distributed.Scheduler`` started with
    ``dashboard_address=address``; None when it has no dashboard."""
    server = getattr(scheduler, "http_server", None)
    if not address or server is None or not getattr(server, "port", None):
        return None
    return dashboard_message(address, server.port)
