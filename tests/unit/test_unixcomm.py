"""``unix://``: distributed's comm between the processes of one user, refused to any other."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import textwrap
import time

import numpy as np
import pytest
from distributed.comm import connect, listen
from distributed.comm.core import CommClosedError, FatalCommClosedError
from distributed.protocol import to_serialize

from hpcgpu.network.unixcomm import UnixConnector

as_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                             reason="needs root to run a process as the user nobody")


def test_a_message_goes_through_and_the_private_directory_goes_at_stop():
    async def main():
        got = []

        async def handle(comm):
            got.append(await comm.read())
            await comm.write("done")
            await comm.close()

        listener = await listen("unix://127.0.0.1:0", handle, require_encryption=True)
        await listener.start()
        path = listener.contact_address[len("unix://"):]
        directory = os.stat(os.path.dirname(path))
        assert (directory.st_mode & 0o777, directory.st_uid) == (0o700, os.geteuid())
        comm = await connect(listener.contact_address, require_encryption=True)
        x = np.arange(3_000_000, dtype="f8")  # 24 MB: many reads and writes
        await comm.write({"x": to_serialize(x)})
        assert await comm.read() == "done"
        await comm.close()
        listener.stop()
        assert not os.path.exists(os.path.dirname(path))
        return got

    got = asyncio.run(main())
    assert np.array_equal(got[0]["x"], np.arange(3_000_000, dtype="f8"))


def test_a_missing_socket_is_a_closed_comm_at_once():
    async def main():
        start = time.monotonic()
        with pytest.raises(CommClosedError):
            await UnixConnector().connect("/nonexistent/hpcgpu/comm.sock")
        return time.monotonic() - start

    assert asyncio.run(main()) < 5


@pytest.fixture
def shared_dir():
    """A directory that nobody may enter and write to, unlike the listeners' own."""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o777)
        yield d


def as_nobody(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
                             textwrap.dedent(code), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/", **kw)


@as_root
def test_a_listener_hangs_up_on_another_user_before_reading(shared_dir):
    """Even where the socket's file lets another user in, the peer's uid is checked."""
    path = os.path.join(shared_dir, "comm.sock")
    handled = []

    async def main():
        async def handle(comm):
            handled.append(comm)

        listener = await listen(f"unix://{path}", handle)
        await listener.start()
        os.chmod(path, 0o777)
        probe = as_nobody("""
            import socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            s.settimeout(20)
            try:
                s.sendall(b"x" * 64)
                print("hung up" if s.recv(1) == b"" else "data")
            except (BrokenPipeError, ConnectionResetError):
                print("hung up")
        """, path)
        while probe.poll() is None:
            await asyncio.sleep(0.05)
        listener.stop()
        return probe

    probe = asyncio.run(main())
    assert probe.returncode == 0, probe.stderr.read()
    assert probe.stdout.read().strip() == "hung up"
    assert handled == []


@as_root
def test_a_connector_refuses_a_socket_another_user_serves(shared_dir):
    path = os.path.join(shared_dir, "planted.sock")
    server = as_nobody("""
        import os, socket, sys
        s = socket.socket(socket.AF_UNIX)
        s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen()
        print("ready", flush=True)
        c, _ = s.accept()
        c.settimeout(20)
        print("read", len(c.recv(1 << 16)), flush=True)
    """, path)
    try:
        assert server.stdout.readline().strip() == "ready"

        async def main():
            with pytest.raises(FatalCommClosedError, match=r"runs as uid \d+, not as"):
                await UnixConnector().connect(path)

        asyncio.run(main())
        assert server.stdout.read().strip() == "read 0"  # nothing was sent to it
    finally:
        server.kill()
        server.wait()
