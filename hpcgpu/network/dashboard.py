"""The dashboard's link, in every mode: dask's ``distributed.dashboard.link`` template
(``{scheme}://{host}:{port}/status`` by default; JupyterHub sites set one such as
``/user/{JUPYTERHUB_USER}/proxy/{port}/status``) filled with the host the dashboard
listens on. Cluster and local mode's ``dashboard_link`` and the messages of ``hpcgpu run``,
``hpcgpu.mpi`` and ``GPURunner`` all come from :func:`dashboard_url`.
"""

from __future__ import annotations

from typing import Any

import dask.config

__all__ = ["dashboard_host", "dashboard_link", "dashboard_url", "tunnel_url"]


def dashboard_host(dashboard_address: Any, scheduler_host: str) -> str:
    """The host a dashboard link must name: the one the dashboard listens on.

    A dashboard on all interfaces (``":8787"``, ``"0.0.0.0:8787"``, a bare port) is
    reached at the scheduler's host; one bound to a host (hpcgpu's default
    ``"localhost:8787"``) only there, so a link to the scheduler's address is refused.

    Examples
    --------
    >>> dashboard_host("localhost:8787", "10.0.0.5")
    'localhost'
    >>> dashboard_host(":8787", "10.0.0.5"), dashboard_host(8787, "10.0.0.5")
    ('10.0.0.5', '10.0.0.5')
    >>> dashboard_host("[::1]:8787", "10.0.0.5")
    '::1'
    """
    text = str(dashboard_address or "")
    host = text.rsplit(":", 1)[0] if ":" in text else ""
    host = host.strip("[]")
    return scheduler_host if host in ("", "0.0.0.0", "::", "*") else host


def dashboard_url(dashboard_address: Any, scheduler_host: str, port: int) -> str:
    """``distributed.dashboard.link`` for a dashboard asked for at ``dashboard_address`` and
    listening on ``port`` (distributed's own ``format_dashboard_link``: ``{scheme}``,
    ``{host}``, ``{port}`` and environment variables such as ``{USER}``).

    >>> dashboard_url("127.0.0.1:8787", "node3", 8790)
    'http://127.0.0.1:8790/status'
    >>> with dask.config.set({"distributed.dashboard.link": "/hub/proxy/{port}/status"}):
    ...     dashboard_url("127.0.0.1:8787", "node3", 8790)
    '/hub/proxy/8790/status'
    """
    from distributed.utils import format_dashboard_link  # distributed is imported where a link is made

    return format_dashboard_link(dashboard_host(dashboard_address, scheduler_host), port)


def tunnel_url(port: int) -> str:
    """Where ``ssh -L port:localhost:port`` brings the dashboard on the user's own machine:
    distributed's default template at ``localhost``, whatever this site's template says."""
    # imported before the config is set: importing distributed adds its defaults to the
    # config, which leaving the ``set`` below would take away again
    from distributed.utils import format_dashboard_link

    with dask.config.set({"distributed.dashboard.link": "{scheme}://{host}:{port}/status"}):
        return format_dashboard_link("localhost", port)


def dashboard_link(scheduler_info: dict, scheduler_address: str, dashboard_address: Any) -> str:
    """The dashboard's address where it listens (upstream names the scheduler's address,
    where a localhost-only dashboard refuses the connection); "" without a dashboard."""
    port = scheduler_info.get("services", {}).get("dashboard")
    if port is None:
        return ""
    scheduler_host = scheduler_address.split("://")[1].split("/")[0].rsplit(":", 1)[0]
    return dashboard_url(dashboard_address, scheduler_host, port)
