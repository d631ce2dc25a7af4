"""The worker's check before it starts (``hpcgpu.worker.reach.check_worker_network``): a
network fault is an error naming the fix; a scheduler that is reached but slow is not."""

import socket
import ssl
import time

import pytest

from hpcgpu.worker import reach


@pytest.fixture
def silent_listener():
    """A port whose connections the kernel accepts and nobody ever answers (a scheduler
    whose event loop is held)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def _client_context(scheduler, args):
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def test_a_scheduler_reached_whose_tls_handshake_is_late_is_no_network_fault(silent_listener, monkeypatch):
    monkeypatch.setattr(reach, "_tls_context", _client_context)
    started = time.monotonic()
    reach.check_worker_network(f"tls://127.0.0.1:{silent_listener}", None, timeout=0.5,
                               security_args={"tls_cert": "unused"})
    assert time.monotonic() - started < 5


def test_a_connection_without_answer_names_the_port_to_open(monkeypatch):
    def dropped(address, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(reach.socket, "create_connection", dropped)
    with pytest.raises(reach.NetworkCheckError, match=r"got no answer from the scheduler at 127\.0\.0\.9:8786 "
                                                      r"within 0\.5 s .*open TCP port 8786"):
        reach.check_worker_network("tls://127.0.0.9:8786", None, timeout=0.5)


def test_a_refused_port_is_a_scheduler_still_starting():
    with socket.socket() as probe:  # a free port: bound and closed again, nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reach.check_worker_network(f"tcp://127.0.0.1:{port}", None, timeout=0.5)


def test_the_check_fails_the_worker_before_it_imports_distributed():
    """A host without the interface asked for: the worker's error, and nothing of distributed
    imported before it (a second of CPU, several on a loaded node, saved on every such fault)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "hpcgpu.worker", "--interface", "nosuch0",
                           "tcp://127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "NetworkCheckError: interface 'nosuch0' does not exist on host" in done.stderr, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "click" in imported and not any(name.split(".")[0] == "distributed" for name in imported), imported
