"""A ``LocalGPUCluster(protocol="ucx+auth")`` of two CPU workers over UCX's TCP transport:
writes the scheduler's report and every socket this process and its children listen on (for
one on the wildcard address, the addresses of this host it takes a connection at), for
tests/integration/test_listeners.py. Argument: the output file. A process of its own: UCX
keeps the first configuration a process gives it."""

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

if __name__ == "__main__":
    from distributed import Client

    from hpcgpu import LocalGPUCluster
    from hpcgpu.network.ucxauth import temporary_key

    before = {(s["ip"], s["port"]) for s in listening([os.getpid()])}
    with temporary_key(), LocalGPUCluster(n_workers=2, gpus=[], protocol="ucx+auth") as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2)
        info = client.scheduler_info(n_workers=-1)
        own = [s for s in listening([os.getpid()]) if (s["ip"], s["port"]) not in before]
        children = listening(with_descendants([os.getpid()]) - {os.getpid()})
        sockets = own + children
        admitting(sockets, [a.address for addresses in psutil.net_if_addrs().values()
                            for a in addresses if a.family == socket.AF_INET])
        with open(sys.argv[1], "w") as handle:
            json.dump({"info": info, "sockets": sockets}, handle, default=str)
