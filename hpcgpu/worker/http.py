"""Where a worker's HTTP server listens: this node's loopback address unless the user asks.

Every Dask worker starts an HTTP server, with or without its dashboard: ``/health``,
``/metrics`` (Prometheus), ``/sitemap.json`` and, with the dashboard, its pages. It has no
password and no TLS, so by default it listens on ``127.0.0.1`` (a free port), as the
scheduler's dashboard does. A site whose Prometheus scrapes the workers sets one option, the
cluster keyword ``worker_http_address`` (config ``hpcgpu.defaults.worker-http-address``, which
the workers of ``hpcgpu run`` and ``hpcgpu.mpi`` read from their own dask config), for
example ``":9100"`` (every interface) or ``"10.1.0.5:0"``: then anyone who reaches that address
reads the workers' metrics and task names (docs/security.md).
"""

from __future__ import annotations

from hpcgpu.jobspec.keywords import http_address
from hpcgpu.system import config

__all__ = ["DEFAULT_HTTP_ADDRESS", "CONFIG_KEY", "worker_http_address", "http_argv"]

#: loopback, a free port: the worker's HTTP server is this node's only
DEFAULT_HTTP_ADDRESS = "127.0.0.1:0"
#: the configuration key (under ``hpcgpu.``) that a site sets to expose the workers' metrics
CONFIG_KEY = "defaults.worker-http-address"


def worker_http_address(given: str | None = None) -> str:
    """``given``, else the configuration's, else :data:`DEFAULT_HTTP_ADDRESS`.

    Examples
    --------
    >>> worker_http_address(), worker_http_address(":9100")
    ('127.0.0.1:0', ':9100')
    >>> import dask
    >>> with dask.config.set({"hpcgpu.defaults.worker-http-address": "10.0.0.5:0"}):
    ...     worker_http_address()
    '10.0.0.5:0'
    """
    chosen = given or config.get(CONFIG_KEY) or DEFAULT_HTTP_ADDRESS
    try:
        return http_address(chosen)
    except ValueError:
        raise ValueError(f"worker_http_address={chosen!r} is not an address host:port "
                         "(':9100', '10.1.0.5:0')") from None


def http_argv(given: str | None, extra: tuple[str, ...]) -> list[str]:
    """``dask worker``'s ``--dashboard-address`` for :func:`worker_http_address`, unless
    ``extra`` (the user's own ``dask worker`` arguments) already names one.

    >>> http_argv(None, ())
    ['--dashboard-address', '127.0.0.1:0']
    >>> http_argv(None, ("--dashboard-address", ":8790"))
    []
    """
    if any(a == "--dashboard-address" or a.startswith("--dashboard-address=") for a in extra):
        return []
    return ["--dashboard-address", worker_http_address(given)]
