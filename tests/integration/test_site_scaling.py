"""Adapt, job arrays and pools across the site's hosts, from ``login``: the workers on
distinct compute hosts, each on its own host's ``ib0`` address, and checked results."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
from site_helpers import run_on_login, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

APP = Path(__file__).resolve().parents[1] / "site_modes_app.py"
FAST_NET = ipaddress.ip_network("10.78.0.0/24")
# 5 of a host's 8 CPUs per GPU job: one such job per host, room beside it for the CPU pool's
ONE_PER_HOST = {"interface": "ib0", "gpus_per_node": 1, "cpus_per_gpu": 5}


def on_own_ib0(ran: list[list[str]]) -> dict[str, str]:
    """host -> its workers' address; each on the fast network, at the host's own address
    (nodeN is 10.78.0.(10+N)), one address per host."""
    hosts: dict[str, set[str]] = {}
    for host, address in ran:
        ip = ipaddress.ip_address(address.split("://")[1].rsplit(":", 1)[0])
        assert ip in FAST_NET and str(ip) == f"10.78.0.{10 + int(host[4:])}", ran
        hosts.setdefault(host, set()).add(str(ip))
    return {host: ips.pop() for host, ips in hosts.items()}


def test_an_array_of_gpu_jobs_and_a_cpu_pool_across_hosts(tmp_path):
    cpu_pool = dict(gpus_per_node=0, cores_per_node=1, memory_per_node="1GB")
    out = run_on_login(tmp_path, "pools", {**ONE_PER_HOST, "pools": {"cpu": cpu_pool}}, app=APP)
    assert out["gpu"]["result"] == sum(x * x for x in range(40)), out
    assert out["cpu"]["result"] == sum(x * x for x in range(40, 60)), out
    gpu_hosts = on_own_ib0(out["gpu"]["ran"])
    assert len(gpu_hosts) == 2 and len(set(gpu_hosts.values())) == 2, out["gpu"]
    assert len(on_own_ib0(out["cpu"]["ran"])) == 1, out["cpu"]
    assert not set(out["gpu"]["names"]) & set(out["cpu"]["names"]), out
    ids = {pool: sorted(job_id for p, job_id, _ in out["jobs"] if p == pool) for pool in ("default", "cpu")}
    # the two GPU jobs: elements 0 and 1 of one array
    assert re.fullmatch(r"(\d+)_0 \1_1", " ".join(ids["default"])), out["jobs"]
    assert len(ids["cpu"]) == 1, out["jobs"]


def test_adapt_grows_over_both_hosts_and_shrinks_back(tmp_path):
    out = run_on_login(tmp_path, "adapt", dict(ONE_PER_HOST), app=APP)
    assert out["result"] == sum(x * x for x in range(60)), out
    assert len(out["grown"]) == 2, out
    hosts = on_own_ib0(out["ran"])
    assert len(hosts) == 2 and len(set(hosts.values())) == 2, out
    assert not {"running", "pending", "submitting"} & set(out["states"]), out
