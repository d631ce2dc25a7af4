"""``hpcgpu doctor`` on a compute host of the site: which of its interfaces reach the
scheduler's address, and the fix when none does."""

from __future__ import annotations

import json

import pytest
from site_helpers import PYTHON, on_host, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.usefixtures("site")]
DOCTOR = ("hpcgpu", "doctor", "--local", "--role", "compute", "--json")


def scheduler_check(address: str) -> dict:
    done = on_host("node1", PYTHON, "-m", *DOCTOR, "--scheduler-address", address, timeout=120)
    report = json.loads(done.stdout)
    return next(c for c in report["checks"] if c["name"] == "Scheduler reachable")


def test_no_interface_reaches_the_login_hosts_outside_address():
    check = scheduler_check("tls://10.79.0.10:8786")
    assert check["verdict"] == "fail", check
    assert "Network is unreachable" in check["summary"], check
    assert "via eth0: not on its network 10.77.0.0/24; via ib0: not on its network 10.78.0.0/24" in check["summary"]
    assert check["fix"].startswith("no interface of this host reaches it"), check
    assert "(eth0 10.77.0.11, ib0 10.78.0.11)" in check["fix"] and "interface='ib0'" in check["fix"], check


def test_the_fast_network_is_reached_through_ib0():
    # nothing listens there: refused, but routed through ib0 (and not eth0)
    check = scheduler_check("tls://10.78.0.10:8786")
    assert "via eth0: not on its network 10.77.0.0/24; via ib0: ok" in check["summary"], check
