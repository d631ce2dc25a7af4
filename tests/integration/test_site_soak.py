"""benchmarks/site_soak.py (scripts/site-soak) for seconds: one fault injected and undone,
results checked, none wrong, and its report's count of what was left is zero."""

from __future__ import annotations

import json
import subprocess

import pytest
from site_faults import compute_hosts, node_state, on_host
from site_helpers import PYTHON, ROOT, assert_nothing_left, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]


def test_a_short_soak_injects_a_fault_checks_results_and_leaves_nothing(tmp_path):
    host = compute_hosts()[-1]
    try:
        done = subprocess.run([PYTHON, "benchmarks/site_soak.py", "--minutes", "0.06", "--faults-every", "1",
                               "--max-faults", "1", "--hold", "1", "--kinds", "link", "--hosts", host, "--seed",
                               "1", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired as error:  # what it printed and what SLURM saw, to tell why
        pytest.fail(f"the soak ran past 120 s; its output:\n{(error.stdout or '')[-3000:]}\n"
                    f"{(error.stderr or '')[-3000:]}\nsqueue:\n{on_host('login', 'squeue', timeout=30).stdout}"
                    f"\nsinfo:\n{on_host('login', 'sinfo', '-N', '-l', timeout=30).stdout}"
                    f"\n{_tails(tmp_path / 'work')}")
    assert (tmp_path / "out" / "site_soak.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "site_soak.json").read_text())
    assert done.returncode == 0 and report["passed"], done.stdout[-3000:] + done.stderr[-3000:]
    assert report["faults_injected"] == 1 and report["faults_by_kind"] == {"link": 1}, report["faults"]
    fault = report["faults"][0]
    assert fault["host"] == host and fault["held_s"] >= 1 and "undo_error" not in fault, fault
    assert report["results"]["checked"] > 0 and report["results"]["wrong"] == 0, report["results"]
    left = report["left"]
    assert left["jobs"] == [] and left["processes"] == {} and left["temp_files"] == [], left
    assert report["workers"]["hosts_seen"] and report["app_ended"] == "stopped", report
    assert node_state(host) == "idle"
    markdown = (tmp_path / "out" / "site_soak.md").read_text()
    assert "**PASSED**: 1 faults injected (link 1)" in markdown and "| 1 |" in markdown, markdown
    assert_nothing_left(30)


def _tails(workdir, size: int = 4000) -> str:
    """The last lines of the soak's app (what it said, its cluster's log) and of each job's
    log: the soak itself prints nothing until it ends, so a soak that never got its first
    result says nothing else of why."""
    files = [workdir / "events.jsonl", workdir / "app.stderr", *sorted((workdir / "logs").glob("*"))]
    return "\n".join(f"== {f.name}:\n{f.read_text(errors='replace')[-size:]}" for f in files if f.is_file())
