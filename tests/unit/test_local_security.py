"""LocalGPUCluster listens on loopback only, refuses strangers with ``security=True``, and
its ``dashboard_link`` answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
import urllib.request
from pathlib import Path

import psutil
import pytest
from distributed import Client
from distributed.security import Security

from hpcgpu import LocalGPUCluster
from hpcgpu.system.workers import scheduler_workers

LOOPBACK = {"127.0.0.1", "::1"}


def listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket of ``pids``."""
    found = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                found.add((conn.laddr.ip, conn.laddr.port))
    return found


def cluster_pids() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(child.pid for child in me.children(recursive=True))}


@pytest.fixture
def opened():
    """``opened()``: the sockets this process and its children listen on that were not
    there when the test began (a test run shares its process with other tests' listeners)."""
    before = listening(cluster_pids())
    return lambda: listening(cluster_pids()) - before


def test_every_listener_and_the_dashboard_are_on_loopback(opened):
    with LocalGPUCluster(n_workers=1, gpus=[]) as cluster, Client(cluster) as client:
        client.wait_for_workers(1, timeout=60)
        sockets = opened()
        # scheduler, dashboard, the worker's HTTP server
        assert len(sockets) >= 3 and {ip for ip, _ in sockets} <= LOOPBACK, sockets
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")  # TLS by default
        # the nanny and the worker: Unix sockets, each alone in a directory only we can enter
        workers = scheduler_workers(client)
        own = [*workers, *(w["nanny"] for w in workers.values())]
        for address in own:
            assert address.startswith("unix:///"), address
            directory = os.stat(os.path.dirname(address[len("unix://"):]))
            assert (directory.st_mode & 0o777, directory.st_uid) == (0o700, os.geteuid()), address
        with urllib.request.urlopen(cluster.dashboard_link, timeout=30) as response:
            assert response.status == 200
        assert cluster.dashboard_link.startswith("http://localhost:"), cluster.dashboard_link


def test_without_a_dashboard_the_http_server_takes_a_free_loopback_port(opened):
    """Not 8787, which the user's own dashboard (or a parallel cluster) may want."""
    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(1, timeout=60)
        sockets = opened()
        assert len(sockets) >= 3 and {ip for ip, _ in sockets} <= LOOPBACK, sockets
        assert 8787 not in {port for _, port in sockets}, sockets


def test_a_host_or_interface_still_opens_other_addresses(opened):
    with LocalGPUCluster(n_workers=1, gpus=[], host="0.0.0.0", dashboard_address=None):
        assert any(ip not in LOOPBACK for ip, _ in opened())


# Run as `nobody` with the system Python (hpcgpu's environment is not readable by that user):
# a TLS 1.2 handshake, where the server's check of the client certificate is part of the
# handshake, so that its verdict is what wrap_socket returns.
PROBE = textwrap.dedent("""
    import socket, ssl, sys
    host, port, cert = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        ctx.load_cert_chain(cert[0], cert[1])
    with socket.create_connection((host, port), timeout=30) as raw:
        try:
            with ctx.wrap_socket(raw) as tls:
                print("accepted")
        except (ssl.SSLError, OSError) as error:
            print("refused", type(error).__name__)
""")


UNIX_PROBE = textwrap.dedent("""
    import socket, sys
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(sys.argv[1])
            print("accepted")
        except OSError as error:
            print("refused", type(error).__name__)
""")


def as_nobody(probe: str, *args: str) -> str:
    """What ``probe`` prints, run by the user ``nobody`` with the system Python."""
    done = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", probe, *args],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def split(address: str) -> tuple[str, int]:
    host, port = address.split("://")[1].rsplit(":", 1)
    return host, int(port)


def probe_as_nobody(address: tuple[str, int], cert: list[str]) -> str:
    return as_nobody(PROBE, address[0], str(address[1]), *cert).split()[0]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                    reason="needs root to run a probe as the user nobody")
def test_another_user_is_refused_by_every_listener_of_a_tls_cluster():
    with tempfile.TemporaryDirectory() as shared:  # readable by nobody, unlike pytest's tmp_path
        os.chmod(shared, 0o755)
        refused_everywhere(Path(shared))


def refused_everywhere(tmp_path: Path) -> None:
    stranger = Security.temporary()  # a certificate of another CA, as another user could make
    files = {"cert": stranger.tls_client_cert, "key": stranger.tls_client_key}
    with LocalGPUCluster(n_workers=1, gpus=[]) as cluster, Client(cluster) as client:  # TLS by default
        client.wait_for_workers(1, timeout=60)
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        own = {"own-cert": cluster.security.tls_client_cert, "own-key": cluster.security.tls_client_key}
        for name, text in {**files, **own}.items():
            (tmp_path / f"{name}.pem").write_text(text)
            (tmp_path / f"{name}.pem").chmod(0o644)  # this test hands them to nobody on purpose
        workers = scheduler_workers(client)
        own = [*workers, *(w["nanny"] for w in workers.values())]
        assert len(own) == 2 and all(a.startswith("unix:///") for a in own), own
        for address in own:  # the kernel refuses nobody: the socket's directory is ours alone
            assert as_nobody(UNIX_PROBE, address[len("unix://"):]) == "refused PermissionError"
        comms = {split(cluster.scheduler_address)}
        assert comms <= listening(cluster_pids()), comms
        for address in comms:
            assert probe_as_nobody(address, []) == "refused"
            assert probe_as_nobody(address, [str(tmp_path / "cert.pem"),
                                                       str(tmp_path / "key.pem")]) == "refused"
        # the probe can tell: with the cluster's own certificate the handshake completes
        assert probe_as_nobody(split(cluster.scheduler_address),
                               [str(tmp_path / "own-cert.pem"), str(tmp_path / "own-key.pem")]) == "accepted"
        assert client.submit(sum, [1, 2]).result() == 3


def test_plain_tcp_only_when_asked_and_warned():
    with pytest.warns(UserWarning, match="security=False"):
        with LocalGPUCluster(n_workers=1, gpus=[], security=False, dashboard_address=None) as cluster:
            assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")


def test_tcp_beside_the_default_certificate_is_refused_before_anything_starts():
    """``protocol='tcp'`` with security on (the default) ended deep in the scheduler's start
    ('encryption required by Dask configuration, refusing communication from/to
    tcp://127.0.0.1:0'), in every mode, ``hpcgpu bench``'s default ``--protocol tcp`` too."""
    from hpcgpu.cluster.batch.network import cluster_network
    from hpcgpu.network.tls import temporary_security

    fixes = r"is unencrypted, .* requires encryption: leave {0} out \(TLS\) or pass {0}='tls', or pass security=False"
    threads = len(psutil.Process().threads())
    with pytest.raises(ValueError, match=fixes.format("protocol")):
        LocalGPUCluster(n_workers=1, gpus=[], protocol="tcp", dashboard_address=None)
    assert len(psutil.Process().threads()) == threads  # no loop, no scheduler started
    with pytest.raises(ValueError, match=fixes.format("protocol")):
        cluster_network({"protocol": "tcp://"}, security=temporary_security())
    with pytest.raises(ValueError, match=fixes.format("client_protocol")):
        cluster_network({"protocol": "ucx", "client_protocol": "tcp"}, security=temporary_security())


def test_the_temporary_certificate_is_an_ecdsa_p256_one_that_a_tls_handshake_accepts():
    """Each cluster makes its certificate at start: P-256 in microseconds, where RSA-2048
    takes about 100 ms; distributed's TLS must still accept it on both ends."""
    import asyncio

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from distributed.comm import connect, listen

    from hpcgpu.network.tls import cluster_security

    security = cluster_security(None, default=True)
    cert = x509.load_pem_x509_certificate(security.tls_scheduler_cert.encode())
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"

    async def round_trip():
        async def echo(comm):
            await comm.write(await comm.read())
            await comm.close()

        async with listen("tls://127.0.0.1:0", echo, **security.get_listen_args("scheduler")) as listener:
            comm = await connect(listener.contact_address, **security.get_connection_args("client"))
            await comm.write({"op": "ping"})
            answer = await comm.read()
            await comm.close()
        return answer

    assert asyncio.run(round_trip()) == {"op": "ping"}
