"""``LocalGPUCluster``s of two CPU workers over UCX's TCP transport, one per protocol named
(``ucx+auth``, plain ``ucx``), one after another: for each, writes the scheduler's report,
the IPv4 addresses of this host and every socket this process and its children listen on
(for one on the wildcard address, those addresses it takes a connection at) and, for plain
``ucx``, the network addresses at which a client without the key joins, for
tests/integration/test_listeners.py. Arguments: the output file, then the protocols. A
process of its own: UCX keeps the first configuration a process gives it."""

from __future__ import annotations

import json
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("UCX_TLS", "tcp")  # no GPU, no InfiniBand here

import psutil  # noqa: E402

from listeners import connects, listening, with_descendants  # noqa: E402


def admitting(sockets: list[dict], addresses: list[str]) -> None:
    """Add to each wildcard listener the addresses of this host at which it takes a
    connection ("admits"): a socket filter keeps ucx+auth's to the asked one."""
    wild = [s for s in sockets if s["ip"] == "0.0.0.0"]
    with ThreadPoolExecutor(16) as pool:
        found = list(pool.map(lambda pair: connects(*pair), [(a, s["port"]) for s in wild for a in addresses]))
    for i, sock in enumerate(wild):
        sock["admits"] = [a for a, ok in zip(addresses, found[i * len(addresses):(i + 1) * len(addresses)]) if ok]


def cluster_listeners(protocol: str, addresses: list[str]) -> dict:
    """The scheduler's report and the sockets of a two-worker cluster speaking ``protocol``."""
    from distributed import Client

    from hpcgpu import LocalGPUCluster

    before = {(s["ip"], s["port"]) for s in listening([os.getpid()])}
    with LocalGPUCluster(n_workers=2, gpus=[], protocol=protocol) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        info = client.scheduler_info(n_workers=-1)
        own = [s for s in listening([os.getpid()]) if (s["ip"], s["port"]) not in before]
        sockets = own + listening(with_descendants([os.getpid()]) - {os.getpid()})
        admitting(sockets, addresses)
        joined = [] if protocol != "ucx" else [a for a in addresses if a != "127.0.0.1" and joins(cluster, a)]
    return {"info": info, "sockets": sockets, "addresses": addresses, "joined": joined}


def joins(cluster, address: str) -> bool:
    """Whether a client without the cluster's key, to the scheduler at ``address`` instead of
    the one it advertises, sees both workers."""
    from distributed import Client

    try:
        with Client(cluster.scheduler_address.replace("127.0.0.1", address), timeout=10) as other:
            return len(other.scheduler_info(n_workers=-1)["workers"]) == 2
    except OSError:
        return False


if __name__ == "__main__":
    from hpcgpu.network.ucxauth import temporary_key

    ipv4 = [a.address for found in psutil.net_if_addrs().values() for a in found if a.family == socket.AF_INET]
    with temporary_key():
        result = {protocol: cluster_listeners(protocol, ipv4) for protocol in sys.argv[2:]}
    with open(sys.argv[1], "w") as handle:
        json.dump(result, handle, default=str)
