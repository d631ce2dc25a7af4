"""The address a batch job's scheduler gives its workers when no interface is named.

Dask takes the address of this host's route to 8.8.8.8. A compute node often has no route
out: Dask then warns (``RuntimeWarning: Couldn't detect a suitable IP address for
reaching '8.8.8.8', defaulting to hostname``) in every job's log and takes the address of
its hostname. A job knows where its workers are: the address of the route to the job's
other hosts is the one they reach it by.
"""

from __future__ import annotations

import socket
from typing import Callable, Sequence

__all__ = ["address_toward", "scheduler_host"]

#: where Dask looks for the route out (``distributed.utils.get_ip``)
DASK_TARGET = "8.8.8.8"


def address_toward(host: str) -> str | None:
    """This host's IPv4 address on its route to ``host`` (a name or an address); None where
    ``host`` does not resolve or no route leads there. Sends nothing: connecting a UDP
    socket only picks the route.

    Examples
    --------
    >>> address_toward("127.0.0.1")
    '127.0.0.1'
    >>> address_toward("no-such-host.invalid") is None
    True
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((socket.gethostbyname(host), 80))
            return sock.getsockname()[0]
    except OSError:
        return None


def scheduler_host(hosts: Sequence[str], own: str | None = None,
                   toward: Callable[[str], str | None] = address_toward) -> str | None:
    """The address for the scheduler of a job on ``hosts``: None where Dask's own choice
    works (a route to 8.8.8.8), else this host's address toward the first other host that
    resolves, else toward this host's own name (``own``, default ``socket.gethostname()``);
    None where nothing resolves.

    Examples
    --------
    >>> routes = {"node2": "10.77.0.11", "node1": "10.77.0.11"}
    >>> scheduler_host(["node1", "node2"], own="node1", toward=routes.get)
    '10.77.0.11'
    >>> scheduler_host(["node1"], own="node1", toward={"8.8.8.8": "192.0.2.5"}.get) is None
    True
    """
    if toward(DASK_TARGET) is not None:
        return None
    own = own or socket.gethostname()
    short = own.split(".")[0]
    others = [h for h in hosts if h.split(".")[0] != short]
    for host in [*others, own]:
        address = toward(host)
        if address is not None:
            return address
    return None
