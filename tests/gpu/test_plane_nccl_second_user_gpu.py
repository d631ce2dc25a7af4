"""Another local user against the plane's NCCL group on a GPU host (marked ``gpu``).

NCCL's only check on its sockets is a short value sent in clear, and its abstract-namespace
Unix sockets have no file permissions (docs/security.md). What the plane promises: NCCL's
TCP listeners are on loopback only, and a second user (``nobody``, uid 65534) who connects
to every listener of the workers' processes (TCP and abstract Unix) with a wrong value and
a well-formed NCCL unique id, during collectives, neither joins nor changes a result, and
every collective still finishes within the plane's timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import dask
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")
psutil = pytest.importorskip("psutil")

#: the attacker: connect to each target, send a wrong value and then the replayed id, a
#: few rounds; report what each target said back (nothing, or bytes) and which connects
#: were refused
ATTACK = r"""
import json, socket, sys, time
targets, token = json.loads(sys.argv[1]), bytes.fromhex(sys.argv[2])
said = {}
for _ in range(3):
    for kind, where in targets:
        s = socket.socket(socket.AF_INET if kind == "tcp" else socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect(tuple(where) if kind == "tcp" else "\0" + where)
            for payload in (b"\xde\xad\xbe\xef" * 8, token, token[:8] + b"\0" * 120):
                s.sendall(payload)
            try:
                said[str(where)] = len(s.recv(4096))
            except OSError:
                said.setdefault(str(where), 0)
        except OSError as error:
            said[str(where)] = type(error).__name__
        finally:
            s.close()
    time.sleep(0.2)
print(json.dumps({"uid": __import__("os").getuid(), "said": said}))
"""


def _port(address: str) -> int | None:
    """The TCP port of a Dask address (None for ``unix://`` and ``inproc://``)."""
    tail = address.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _listeners(pids: list[int], dask_ports: set) -> tuple[list, list]:
    """(TCP listeners not Dask's, abstract Unix socket names) of these processes."""
    tcp = []
    inodes = set()
    for pid in pids:
        proc = psutil.Process(pid)
        tcp += [c.laddr for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN
                and c.laddr.port not in dask_ports]
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}") if os.path.islink(f"/proc/{pid}/fd/{fd}") else ""
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    unix = []
    with open("/proc/net/unix") as fh:
        for line in fh.readlines()[1:]:
            parts = line.split()
            listening = parts[3] == "00010000"  # __SO_ACCEPTCON
            if len(parts) >= 8 and parts[6] in inodes and parts[7].startswith("@") and listening:
                unix.append(parts[7][1:])
    return tcp, sorted(set(unix))


def test_a_second_user_neither_joins_nor_disturbs_the_nccl_group():
    from distributed import Client

    import hpcgpu.array as ha
    from hpcgpu import LocalGPUCluster
    from hpcgpu.array import plane

    if os.geteuid() != 0:
        pytest.fail("this test acts as a second user (nobody): run it as root")
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs or more")
    with dask.config.set({"hpcgpu.array.plane.timeout": 5}), \
            LocalGPUCluster(n_workers=2, dashboard_address=None) as cluster, Client(cluster) as client:
        x = ha.random.random(size=(8000, 8000), chunks=(1000, 1000), seed=1).persist()
        want = cupy.asnumpy(x.compute())
        assert np.array_equal(cupy.asnumpy(plane.rechunk(x, (8000, 500), method="collective").compute()), want)
        assert {h[2] for h in client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1]).values()} == {"nccl"}
        pids = list(client.run(os.getpid).values())
        workers = client.scheduler_info()["workers"]
        ports = {_port(a) for w, info in workers.items() for a in (w, info["nanny"])}  # Dask's own
        tcp, unix = _listeners(pids, ports)
        assert all(addr.ip in ("127.0.0.1", "::1") for addr in tcp), tcp  # NCCL on loopback only
        from cupy.cuda import nccl

        token = bytes(nccl.get_unique_id()).hex()  # a well-formed id, of another group
        targets = [["tcp", [a.ip, a.port]] for a in tcp] + [["unix", name] for name in unix]
        box = {}

        def attack():
            box["out"] = subprocess.run([sys.executable, "-I", "-c", ATTACK, json.dumps(targets),
                                         token], user=65534, group=65534, extra_groups=[],
                                        capture_output=True, text=True, timeout=120)

        thread = threading.Thread(target=attack)
        thread.start()
        results = []
        while thread.is_alive() and len(results) < 20:  # collectives while the attacker works
            results.append(cupy.asnumpy(plane.rechunk(x, (500, 8000), method="collective").compute()))
        thread.join()
        out = box["out"]
        assert out.returncode == 0, out.stderr[-2000:]
        report = json.loads(out.stdout)
        assert report["uid"] == 65534 and results
        assert all(np.array_equal(r, want) for r in results)
        after = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1])
        assert {h[2] for h in after.values()} == {"nccl"} and {h[3] for h in after.values()} == {2}, after
        assert len(client.scheduler_info()["workers"]) == 2
        print(json.dumps({"tcp": [list(a) for a in tcp], "unix": unix, "attacker": report}))
