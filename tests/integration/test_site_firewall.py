"""The login host's firewall dropping the connections to the workers' ports (the scheduler
and client connect back to each worker and its nanny): hpcgpu's message within 15 s names
the ports to open and the option that sets them, and nothing is left on any host. The
other direction (the workers' connections to the scheduler's port) is in test_site_faults.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from site_helpers import on_host, run_on_login, site  # noqa: F401

APP = Path(__file__).resolve().parents[1] / "site_modes_app.py"

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

PORTS = ["--worker-port", "9000:9100", "--nanny-port", "9100:9200"]


@pytest.fixture
def login_drops_the_workers_ports():
    """Login's new connections to ports 9000-9200 on the fast network dropped; the workers'
    own connections (and their answers) pass."""
    rule = ("add table inet hpcgpu_ports; add chain inet hpcgpu_ports output "
            "{ type filter hook output priority 0; }; "
            "add rule inet hpcgpu_ports output ip daddr 10.78.0.0/24 tcp dport 9000-9200 drop")
    done = on_host("login", "nft", rule, timeout=30)
    assert done.returncode == 0, done.stderr
    yield
    on_host("login", "nft", "delete table inet hpcgpu_ports", timeout=30)


def test_the_login_host_dropping_the_workers_ports(login_drops_the_workers_ports, tmp_path):
    out = run_on_login(tmp_path, "firewall", {"interface": "ib0", "gpus_per_node": 1, "exclusive": True,
                                              "worker_extra_args": PORTS}, app=APP)
    error = out.get("error", "")
    # from scale(): 4.4 s on an idle 2-core machine, 17 s in a loaded CI run; hpcgpu's part is
    # the 3 s (PROBE_TIMEOUT) after the first worker joined. As in test_site_faults.py, the 15 s
    # run from the first job running: the scheduler's time to start one is not the cluster's.
    assert out.get("after_join") is not None and out["after_join"] < 5, out
    assert out["after_start"] is not None and out["after_start"] < 15, out
    assert error.startswith("NetworkCheckError: "), out
    assert re.search(r"host login got no answer from (the nanny of )?worker '[^']+' \(job \d+(_\d)? on "
                     r"node\d\) at tls://10\.78\.0\.1\d:9[01]\d\d within 3 s \(packets dropped, as "
                     r"a firewall does\)", error), error
    assert ("open TCP ports 9000-9100 (--worker-port) and 9100-9200 (--nanny-port) from host login "
            "to the compute hosts" in error), error
    assert "worker_extra_args=['--worker-port', 'A:B', '--nanny-port', 'C:D']" in error, error
    assert "Traceback" not in error and "Timed out trying" not in error, error
