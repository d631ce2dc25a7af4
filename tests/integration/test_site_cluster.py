"""Cluster mode across the site's hosts (scripts/setup-site): the client and scheduler on
``login``, the workers on ``node1`` and ``node2``, each host its own network stack."""

from __future__ import annotations

import ipaddress
import json
import subprocess

import pytest
from site_helpers import PYTHON, ROOT, assert_nothing_left, host_of, on_host, run_on_login, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

FAST_NET = ipaddress.ip_network("10.78.0.0/24")
MANAGEMENT = ipaddress.ip_network("10.77.0.0/24")
RESULT = sum(x * x for x in range(200))


def test_interface_ib0_puts_workers_of_both_hosts_on_the_fast_network(tmp_path):
    # the workers' ports in the ranges docs/sites.md tells a firewalled site to open
    ports = ["--worker-port", "9000:9100", "--nanny-port", "9100:9200"]
    out = run_on_login(tmp_path, "compute", {"interface": "ib0", "gpus_per_node": 2, "exclusive": True,
                                             "worker_extra_args": ports, "_scale": {"gpus": 4}, "_workers": 4})
    assert out["result"] == out["summed"] == RESULT
    assert host_of(out["scheduler"]) == ipaddress.ip_address("10.78.0.10")
    hosts = out["hosts"]
    assert sorted(hosts.values()) == ["node1", "node1", "node2", "node2"], hosts
    addresses = {address: host_of(address) for address in hosts}
    assert all(ip in FAST_NET for ip in addresses.values()), hosts
    assert all(9000 <= int(a.rsplit(":", 1)[1]) <= 9100 for a in hosts), hosts
    # each host's workers listen on its own ib0 address
    by_host = {name: {addresses[a] for a, h in hosts.items() if h == name} for name in ("node1", "node2")}
    assert by_host == {"node1": {ipaddress.ip_address("10.78.0.11")},
                       "node2": {ipaddress.ip_address("10.78.0.12")}}, hosts


def test_no_interface_works_over_the_hosts_names(tmp_path):
    # No default route on a site host: distributed falls back to the hostname, which
    # /etc/hosts maps to the management network (as sites do).
    out = run_on_login(tmp_path, "compute", {"gpus_per_node": 1, "exclusive": True,
                                             "_scale": {"jobs": 2}, "_workers": 2})
    assert out["result"] == RESULT
    assert host_of(out["scheduler"]) == ipaddress.ip_address("10.77.0.10")
    assert sorted(out["hosts"].values()) == ["node1", "node2"], out["hosts"]
    assert all(host_of(a) in MANAGEMENT for a in out["hosts"]), out["hosts"]


def test_a_client_without_the_clusters_credentials_is_refused_from_another_host(tmp_path):
    options = {"interface": "ib0", "log_directory": str(tmp_path / "logs"),
               "walltime": "00:05:00", "scheduler_options": {"dashboard_address": "localhost:0"}}
    serve = subprocess.Popen(["bash", str(ROOT / "scripts" / "site-exec"), "login", PYTHON,
                              str(ROOT / "tests" / "site_app.py"), "serve", json.dumps(options)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        address = json.loads(serve.stdout.readline())["scheduler"]
        assert address.startswith("tls://10.78.0.10:"), address
        probe = ("import sys\nfrom distributed import Client\n"
                 "for address in sys.argv[1:]:\n"
                 "    try:\n        Client(address, timeout=5).close()\n        print('connected', address)\n"
                 "    except Exception as error:\n        print('refused', address, type(error).__name__)\n")
        plain = address.replace("tls://", "tcp://")
        done = on_host("node1", PYTHON, "-c", probe, address, plain, timeout=60)
        assert done.stdout.count("refused") == 2 and "connected" not in done.stdout, (done.stdout, done.stderr)
    finally:
        serve.communicate("done\n", timeout=60)
    assert serve.returncode == 0
    assert_nothing_left()


def test_ucx_over_tcp_between_the_hosts(tmp_path):
    """protocol="ucx" with the site's interface, as a site with InfiniBand sets it; UCX_TLS=tcp
    forced, since the hosts share one kernel (shared memory would otherwise carry it)."""
    from hpcgpu.network import ucx_unavailable_reason

    if (reason := ucx_unavailable_reason()) is not None:
        pytest.skip(f"needs distributed-ucxx (pip install 'hpcgpu[ucx]'): {reason}")
    out = run_on_login(tmp_path, "compute", {"protocol": "ucx", "interface": "ib0", "gpus_per_node": 1,
                                             "exclusive": True, "_scale": {"jobs": 2}, "_workers": 2},
                       env={"UCX_TLS": "tcp"})
    assert out["scheduler"].startswith("tls://10.78.0.10:"), out  # the client's: the scheduler runs apart
    assert sorted(out["hosts"].values()) == ["node1", "node2"], out
    assert all(a.startswith(("ucx://10.78.0.11:", "ucx://10.78.0.12:")) for a in out["hosts"]), out
    assert out["ucx_tls"] == ["tcp"], out
    assert out["result"] == out["summed"] == RESULT and out["transfers"] > 0, out
