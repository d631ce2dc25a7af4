"""scripts/setup-site run again on a site in use: it keeps the site, its size and its jobs
(the site fixture of every site test runs it; a rebuild would kill the jobs of the others)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import wait_for
from site_faults import SITE, compute_hosts, on_host, site_jobs
from site_helpers import ROOT, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]


def test_setup_site_again_keeps_a_busy_site_of_any_size_and_its_jobs():
    hosts, ctld = compute_hosts(), (SITE / "slurm" / "slurmctld.pid").read_text()
    submitted = on_host("login", "sbatch", "--parsable", "-J", "keep-me", "-o", "/dev/null",
                        "--wrap", "sleep 120", timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    try:
        wait_for(lambda: f"{job} RUNNING" in site_jobs("keep-me"), 30, 0.2, what="the job to run")
        done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-site")], capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0 and f"up (login, node1..node{len(hosts)})" in done.stderr, done.stderr
        assert (SITE / "slurm" / "slurmctld.pid").read_text() == ctld, "the site was rebuilt"
        assert compute_hosts() == hosts and f"{job} RUNNING" in site_jobs("keep-me")
    finally:
        on_host("login", "scancel", job, timeout=30)
    wait_for(lambda: not site_jobs("keep-me"), 30, 0.2, what="the job to end")
