"""One stream between two processes of one host, per transport: what a chunk moving between
two workers of ``LocalGPUCluster`` can reach.

Sides: a raw socket (the limit), a raw ``ssl`` stream (TLS's own cost), and distributed's
comm (framing, serialisation, event loop) over ``tcp://``, ``tls://`` and hpcgpu's
``unix://`` (:mod:`hpcgpu.network.unixcomm`) with the kernel's default socket buffers and
with hpcgpu's. Each figure is GiB/s of messages of ``--mib`` MiB, one message in flight, the
receiver acknowledging each. Prints one JSON line per side and size; ``--out`` also writes them.

    python benchmarks/transport_probe.py --repeats 3 --out transport_probe.jsonl
    python benchmarks/transport_probe.py --smoke          # tiny sizes, for a CPU test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
MIB = 1 << 20
COMM_SIDES = ("tcp", "tls", "unix-kernel-buffers", "unix")


def contexts(cert_dir: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(f"{cert_dir}/c.pem", f"{cert_dir}/k.pem")
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(f"{cert_dir}/c.pem")
    client.check_hostname = False
    return server, client


def raw_receiver(cert_dir: str, tls: bool, nbytes: int, port_q) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port_q.put(listener.getsockname()[1])
    conn, _ = listener.accept()
    if tls:
        conn = contexts(cert_dir)[0].wrap_socket(conn, server_side=True)
    view, got = memoryview(bytearray(4 * MIB)), 0
    while got < nbytes:
        got += conn.recv_into(view) or nbytes
    conn.sendall(b"k")
    conn.close()


def raw(cert_dir: str, tls: bool, nbytes: int) -> float:
    """GiB/s of one raw stream of ``nbytes`` (plain socket or ``ssl``)."""
    spawn = mp.get_context("spawn")
    port_q = spawn.Queue()
    receiver = spawn.Process(target=raw_receiver, args=(cert_dir, tls, nbytes, port_q))
    receiver.start()
    sock = socket.create_connection(("127.0.0.1", port_q.get(timeout=60)))
    if tls:
        sock = contexts(cert_dir)[1].wrap_socket(sock, server_hostname="localhost")
    block = memoryview(os.urandom(MIB) * min(16, nbytes // MIB))  # nbytes: a multiple of it
    start, sent = time.perf_counter(), 0
    while sent < nbytes:
        sock.sendall(block)
        sent += len(block)
    sock.recv(1)
    seconds = time.perf_counter() - start
    receiver.join(60)
    return sent / seconds / (1 << 30)


def use_side(side: str) -> str:
    """The scheme of ``side``, with hpcgpu's unix backend registered and sized for it."""
    if side.startswith("unix"):
        from hpcgpu.network import unixcomm

        unixcomm.register()  # a source tree without package metadata has no entry point
        if side == "unix-kernel-buffers":
            unixcomm.SOCKET_BUFFER = None
        return "unix"
    return side


def comm_receiver(cert_dir: str, side: str, address_q) -> None:
    import distributed.comm as dc

    scheme = use_side(side)

    async def main():
        done = asyncio.Event()

        async def handle(comm):
            while await comm.read() != "stop":
                await comm.write("ok")
            done.set()

        kwargs = {"ssl_context": contexts(cert_dir)[0]} if scheme == "tls" else {}
        listener = await dc.listen(f"{scheme}://127.0.0.1:0", handle, **kwargs)
        await listener.start()
        address_q.put(listener.contact_address)
        await done.wait()
        listener.stop()

    asyncio.run(main())


def comm(cert_dir: str, side: str, size: int, rounds: int) -> float:
    """GiB/s of ``rounds`` messages of ``size`` bytes through distributed's comm over ``side``."""
    import numpy as np
    import distributed.comm as dc
    from distributed.protocol import to_serialize

    scheme = use_side(side)
    spawn = mp.get_context("spawn")
    address_q = spawn.Queue()
    receiver = spawn.Process(target=comm_receiver, args=(cert_dir, side, address_q))
    receiver.start()
    address = address_q.get(timeout=60)

    async def main() -> float:
        kwargs = {"ssl_context": contexts(cert_dir)[1]} if scheme == "tls" else {}
        c = await dc.connect(address, **kwargs)
        message = {"x": to_serialize(np.frombuffer(os.urandom(size), dtype="u1"))}
        await c.write(message)  # the first one pays for the connection's set-up
        await c.read()
        start = time.perf_counter()
        for _ in range(rounds):
            await c.write(message)
            await c.read()
        seconds = time.perf_counter() - start
        await c.write("stop")
        await c.close()
        return size * rounds / seconds / (1 << 30)

    rate = asyncio.run(main())
    receiver.join(60)
    return rate


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", default="4,32", help="message sizes in MiB, comma-separated")
    parser.add_argument("--total-mib", type=int, default=256, help="MiB per measurement and size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="1 MiB messages, 4 MiB per measurement, once")
    parser.add_argument("--out", type=Path, help="also write the JSON lines here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.mib, args.total_mib, args.repeats = "1", 4, 1
    sizes = [int(m) for m in args.mib.split(",")]
    cert_dir = tempfile.mkdtemp()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", f"{cert_dir}/k.pem",
                    "-out", f"{cert_dir}/c.pem"], check=True, capture_output=True)
    lines = [dict(side="host", python=sys.version.split()[0], openssl=ssl.OPENSSL_VERSION,
                  kernel=platform.release(), cores=os.cpu_count())]
    for tls in (False, True):
        rates = [raw(cert_dir, tls, args.total_mib * MIB) for _ in range(args.repeats)]
        lines.append(dict(side="raw ssl" if tls else "raw socket", gib_s=rates))
    for side in COMM_SIDES:
        for mib in sizes:
            rounds = max(2, args.total_mib // mib)
            rates = [comm(cert_dir, side, mib * MIB, rounds) for _ in range(args.repeats)]
            lines.append(dict(side=f"comm {side}", mib=mib, gib_s=rates))
    for line in lines:
        print(json.dumps(line), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


if __name__ == "__main__":
    main()
