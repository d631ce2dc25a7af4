"""benchmarks/site_bootstrap.py runs on the site (scripts/setup-site): a smoke run at its
smallest, one case of each part; the figures are records, not asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from site_helpers import ROOT, assert_nothing_left, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]


def _run(tmp_path, *argv: str) -> dict:
    out = tmp_path / "site_bootstrap.json"
    # about 9 s on an idle machine; 116-148 s in CI runs on 2 cores (the old 150 s limit was hit
    # twice), the time after the workers connect not explained
    done = subprocess.run([sys.executable, "benchmarks/site_bootstrap.py", *argv, "--tmp", str(tmp_path),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert_nothing_left()
    return json.loads(out.read_text())


def test_site_bootstrap_times_the_start_up_of_a_hosts_workers(tmp_path):
    result = _run(tmp_path, "--runs", "1", "--workers", "4", "--designs", "forked-server",
                  "--skip", "transfer", "reference")
    (run,) = result["startup"]["forked-server N=4"]["runs"]
    assert run["pinned"] and run["hosts"] == 1, run
    assert 0 < run["from_job_start"] <= run["from_scale"], run


def test_site_bootstrap_times_a_transfer_between_hosts_and_the_raw_stream(tmp_path):
    result = _run(tmp_path, "--protocols", "tcp", "--placements", "hosts", "--mib", "4", "--repeats", "1",
                  "--skip", "boot")
    transfer = result["transfers"]["tcp hosts"]
    assert transfer["hosts"] == ["node1", "node2"] and transfer["address"] == "tcp", transfer
    assert all(result["reference"][case]["median_gib_s"] > 0 for case in ("raw hosts", "raw one host"))
