"""A ``LocalGPUCluster(protocol="ucx+auth")`` of two CPU workers over UCX's TCP transport:
writes the scheduler's report and every socket this process and its children listen on, for
tests/integration/test_listeners.py. Argument: the output file. A process of its own: UCX
keeps the first configuration a process gives it."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("UCX_TLS", "tcp")  # no GPU, no InfiniBand here

from listeners import listening, with_descendants  # noqa: E402

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
        with open(sys.argv[1], "w") as handle:
            json.dump({"info": info, "sockets": own + children}, handle, default=str)
