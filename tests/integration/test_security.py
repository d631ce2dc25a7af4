"""Security on the real local SLURM: TLS refuses strangers, files are private, the dashboard
is local, and no key ends up anywhere another user could read it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from distributed.security import Security

from cluster_helpers import FAST
from hpcgpu import SLURMCluster
from hpcgpu.system import commands

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster(slurm, clusters):
    return clusters(SLURMCluster, gpus_per_node=1, **FAST)


def worker(address: str, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hpcgpu.worker", address, "--death-timeout", "5",
            "--no-cpu-affinity", "--name", "intruder", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_worker_without_the_certificate_is_refused(cluster, tmp_path):
    address = cluster.scheduler_address
    plain = worker(address)  # no certificate at all
    other = Security.temporary()  # a certificate of another CA
    files = {}
    for kind, text in (("ca", other.tls_ca_file), ("cert", other.tls_worker_cert),
                       ("key", other.tls_worker_key)):
        files[kind] = tmp_path / f"{kind}.pem"
        files[kind].write_text(text)
    forged = worker(address, "--tls-ca-file", str(files["ca"]), "--tls-cert",
                    str(files["cert"]), "--tls-key", str(files["key"]))
    for done in (plain, forged):
        assert done.returncode != 0, done.stderr[-2000:]
        assert "Timed out starting worker" in done.stderr or "TLS" in done.stderr
    assert not cluster.scheduler.workers  # nobody got in


def test_dashboard_listens_on_localhost_only(cluster):
    sockets = [s for server in [cluster.scheduler.http_server]
               for s in server._sockets.values()]
    hosts = {s.getsockname()[0] for s in sockets}
    assert hosts and hosts <= {"127.0.0.1", "::1"}, hosts


def test_scripts_certificates_and_logs_are_private(cluster, tmp_path):
    real = commands.runner
    secret = cluster.security.tls_worker_key.strip().splitlines()[1]
    submitted: list[tuple[list[str], str]] = []

    def spy(argv, timeout, input):
        if argv[0] == "sbatch":
            submitted.append((list(argv), input))
        return real(argv, timeout, input)

    commands.set_runner(spy)
    try:
        cluster.scale(jobs=1)
        cluster.wait_for_workers(gpus=1, timeout=60)
    finally:
        commands.set_runner(None)
    # The script goes on sbatch's standard input (no file), naming the key's file only.
    [(argv, script)] = submitted
    assert argv == ["sbatch", "--parsable"] and secret not in script
    private = Path(cluster.private_directory.made)
    assert f"--tls-key {private}/key.pem" in script
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE((private / "key.pem").stat().st_mode) == 0o600
    # The key is in no other file of the log directory, and in no file others can read in
    # /tmp; cluster.job_script() is what was submitted.
    logs = Path(cluster._log_directory)
    places = [logs, Path("/tmp"), Path(os.environ.get("TMPDIR", "/tmp"))]
    leaks = []
    for place in places:
        for path in place.rglob("*") if place == logs else place.glob("*"):
            try:
                if not path.is_file() or path.stat().st_size > 1 << 20 or private in path.parents:
                    continue
                readable_by_others = path.stat().st_mode & 0o004
                if (place == logs or readable_by_others) and secret in path.read_text(
                        errors="ignore"):
                    leaks.append(str(path))
            except OSError:
                continue
    assert not leaks
    assert secret not in cluster.job_script()
    assert all(stat.S_IMODE(p.parent.stat().st_mode) == 0o700 for p in logs.glob("*.err"))
