"""Where the dashboard of a batch run listens, and how its user reaches it.

The dashboard has no password: by default it listens on this node's loopback address
only, as cluster mode's does, and the job's log gives its link (dask's
``distributed.dashboard.link`` template, as cluster mode's ``dashboard_link``) and the
``ssh -L`` that reaches it: a proxy on another host cannot.
Another address (``--dashboard-address :8787`` for every interface) is the user's choice.
"""

from __future__ import annotations

import socket

from hpcgpu.network.dashboard import dashboard_url, tunnel_url

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
    """What the log says about the dashboard listening on ``port`` (asked for as ``address``):
    its link as dask's ``distributed.dashboard.link`` template makes it (as cluster mode's
    ``dashboard_link``), and, for a dashboard on this node's loopback, the ``ssh -L`` that
    reaches it (a proxy on another host, JupyterHub's on a login node included, cannot).

    Examples
    --------
    >>> dashboard_message("127.0.0.1:8787", 8787, "node3")  # doctest: +NORMALIZE_WHITESPACE
    'dashboard: http://127.0.0.1:8787/status on node3 (this node only, no password); from your
     own machine: ssh -L 8787:localhost:8787 node3, then open http://localhost:8787/status'
    >>> dashboard_message(":8787", 8790, "node3")
    'dashboard: http://node3:8790/status (every interface of node3, no password)'
    """
    host = host or socket.gethostname()
    try:
        link = dashboard_url(address, host, port)
    except (KeyError, IndexError, ValueError) as error:  # a name the template uses is not set here
        link = f"{tunnel_url(port)} (distributed.dashboard.link: {type(error).__name__} {error})"
    if is_loopback(address):
        return (f"dashboard: {link} on {host} (this node only, no password); from your own machine: "
                f"ssh -L {port}:localhost:{port} {host}, then open {tunnel_url(port)}")
    bind = address.rsplit(":", 1)[0].strip("[]")
    if bind in ("", "0.0.0.0", "::"):
        return f"dashboard: {link} (every interface of {host}, no password)"
    return f"dashboard: {link} (on {bind} of {host}, no password)"


def scheduler_dashboard_message(scheduler, address: str | None) -> str | None:
    """:func:`dashboard_message` for an in-process ``distributed.Scheduler`` started with
    ``dashboard_address=address``; None when it has no dashboard."""
    server = getattr(scheduler, "http_server", None)
    if not address or server is None or not getattr(server, "port", None):
        return None
    return dashboard_message(address, server.port)
