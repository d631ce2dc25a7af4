"""Grid Engine across the site's hosts (scripts/site-sge: qmaster on ``login``, an execd on
each compute host): cluster mode from ``login`` with workers on both hosts, and batch mode
(``hpcgpu run`` under ``qsub``, Open MPI's ``mpirun`` reaching the second host through the
parallel environment) across them."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from pathlib import Path

import pytest
from conftest import wait_for
from site_helpers import (  # noqa: F401
    CHECK, PYTHON, ROOT, assert_checked_on_both_hosts, host_of, on_host, run_on_login, site)

pytestmark = [pytest.mark.site, pytest.mark.sge, pytest.mark.usefixtures("site", "site_sge")]

RESULT = sum(x * x for x in range(200))


@pytest.fixture(scope="module")
def site_sge(site):
    """The site's Grid Engine cell, built (or repaired: a fault test may have killed a host's
    execd) by scripts/site-sge."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "site-sge")], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_sge_cluster_from_login_puts_a_worker_on_each_host_over_ib0(tmp_path):
    out = run_on_login(tmp_path, "compute", {"_cluster": "SGECluster", "interface": "ib0", "gpus_per_node": 1,
                                             "exclusive": True, "_scale": {"jobs": 2}, "_workers": 2})
    assert out["result"] == out["summed"] == RESULT, out
    assert host_of(out["scheduler"]) == ipaddress.ip_address("10.78.0.10"), out
    hosts = out["hosts"]
    assert sorted(hosts.values()) == ["node1", "node2"], hosts
    assert {host_of(a): h for a, h in hosts.items()} == {ipaddress.ip_address("10.78.0.11"): "node1",
                                                     ipaddress.ip_address("10.78.0.12"): "node2"}, hosts


def sge_exit_status(job_id: str) -> tuple[int] | None:
    """(exit status,) that ``qacct`` records for a finished job of the site's cell (None: not yet)."""
    text = on_host("login", "qacct", "-j", job_id, timeout=30).stdout
    found = re.search(r"^exit_status\s+(\d+)", text, re.M)
    return (int(found.group(1)),) if found else None


def test_hpcgpu_run_under_qsub_over_two_hosts(tmp_path):
    """One slot and one GPU on each host (PE ``mpi``, ``$round_robin``): ``hpcgpu run
    --launcher mpirun`` starts a worker on each, Open MPI reaching the second host through
    ``qrsh -inherit``, as it does under Grid Engine."""
    submitted = on_host(
        "login", "qsub", "-terse", "-pe", "mpi", "2", "-l", "gpu=1", "-l", "h_rt=00:05:00", "-cwd", "-j", "y",
        "-o", str(tmp_path), "-v", f"HPCGPU_PYTHON={PYTHON},OMPI_ALLOW_RUN_AS_ROOT=1,"
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", str(ROOT / "jobscripts" / "sge-2x4.sge"), str(CHECK),
        "--expect", "2", "--json", "result.json", cwd=tmp_path, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    (status,) = wait_for(lambda: sge_exit_status(job_id), 150, 0.5, what=f"site job {job_id} to end")
    log = "".join(p.read_text()[-4000:] for p in Path(tmp_path).glob(f"*.o{job_id}"))
    assert status == 0, log
    assert_checked_on_both_hosts(tmp_path)
