"""The site in a box (scripts/setup-site): its fixture and the ways tests reach its hosts.

Tests reach site hosts only through scripts/site-exec (each host is its own network and UTS
namespace; this process is on none of the site's networks). Import the fixture with
``from site_helpers import site``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_for
from site_faults import SITE, leftovers, on_host, sge_jobs, site_jobs  # noqa: F401  (the tests' names)

ROOT = Path(__file__).resolve().parents[1]
COMPUTE = ("node1", "node2")
PYTHON = sys.executable
CHECK = ROOT / "examples" / "check_gpu_workers.py"
#: cluster options every site test uses: small, quick to notice a failed job
FAST = {"walltime": "00:05:00", "death_timeout": 30, "poll_interval": 0.5,
        "scheduler_options": {"dashboard_address": "localhost:0"}}


@pytest.fixture(scope="session")
def site():
    """The site, built by scripts/setup-site (idempotent) when missing; taken down at the end
    if this session built it. Skips only where it cannot exist (not root on Linux); under
    CI=true a site that cannot be built fails the tests."""
    if platform.system() != "Linux" or os.geteuid() != 0:
        pytest.skip("the site in a box needs root on Linux (scripts/setup-site)")
    built_here = not (SITE / "compute-hosts").exists()
    # a site that is there keeps its size: setup-site rebuilds one of another size, which
    # kills every process on its hosts (a soak's or a benchmark's on a 4-host site)
    try:
        hosts = ["--compute-hosts", str(max(2, int((SITE / "compute-hosts").read_text())))]
    except (OSError, ValueError):  # none, or one being built
        hosts = []
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-site"), *hosts], capture_output=True,
                          text=True, timeout=180, check=False)
    if done.returncode != 0:
        reason = f"scripts/setup-site failed:\n{done.stderr[-3000:]}"
        if os.environ.get("CI") == "true" or "SLURM is not installed" not in done.stderr:
            pytest.fail(reason)
        pytest.skip(reason)
    yield
    if built_here:
        subprocess.run(["bash", str(ROOT / "scripts" / "setup-site"), "--down"], timeout=120, check=False)


def host_of(address: str) -> ipaddress.IPv4Address:
    """The IP address in a Dask address (``tls://10.78.0.11:9000`` -> 10.78.0.11)."""
    return ipaddress.ip_address(address.split("://")[1].rsplit(":", 1)[0])


APP = Path(__file__).with_name("site_app.py")


def run_on_login(tmp_path: Path, mode: str, options: dict, timeout: float = 150,
                 env: dict | None = None, app: Path = APP) -> dict:
    """Run ``app`` (tests/site_app.py) on the login host (``mode`` and the cluster's ``options``);
    the JSON of its last output line (its whole output is in the assertion message otherwise)."""
    options = {**FAST, "log_directory": str(tmp_path / "logs"), **options}
    done = on_host("login", PYTHON, str(app), mode, json.dumps(options), timeout=timeout, cwd=tmp_path,
                   env={**os.environ, **(env or {})})
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(f"no JSON from the login host (exit {done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}") from None
    result["stderr"] = done.stderr
    assert_nothing_left()
    return result


def assert_nothing_left(timeout: float = 30) -> None:
    """No site job listed (SLURM's, Grid Engine's) and no process left on any compute host
    (waits for them to end)."""
    try:
        wait_for(lambda: not site_jobs() and not sge_jobs() and not leftovers(), timeout,
                 what="the site's jobs and processes to end")
    except AssertionError as error:
        raise AssertionError(f"{error}: jobs {site_jobs() + sge_jobs()}, processes {leftovers()}") from None


def job_finished(job_id: str) -> tuple[str, str] | None:
    """(state, exit code) of a site job once it has ended, else None."""
    text = on_host("login", "scontrol", "show", "job", job_id, timeout=30).stdout
    state, code = re.search(r"JobState=(\S+)", text), re.search(r"\bExitCode=(\S+)", text)
    if state and state.group(1) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
        return state.group(1), code.group(1)
    return None


def job_logs(directory: Path, job_id: str) -> str:
    """The tails of a site job's output files (``%j.*`` in ``directory``)."""
    return "".join(p.read_text()[-3000:] for p in sorted(directory.glob(f"{job_id}.*")))


def sbatch_and_wait(tmp_path: Path, *options: str, state: tuple[str, str] = ("COMPLETED", "0:0")) -> None:
    """``sbatch`` on the login host (2 GB, 5 minutes, output in ``tmp_path``), wait for the
    job to end and check its (state, exit code)."""
    done = on_host("login", "sbatch", "--parsable", "--mem=2G", "--time=5", f"--chdir={tmp_path}",
                   f"--output={tmp_path}/%j.out", *options, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    ended = wait_for(lambda: job_finished(job_id), 120, 0.5, what=f"site job {job_id}")
    assert ended == state, job_logs(tmp_path, job_id)


def assert_checked_on_both_hosts(tmp_path: Path) -> None:
    """examples/check_gpu_workers.py's ``result.json`` passed every check with a worker on
    each compute host, and nothing is left behind."""
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(result["checks"].values()), result
    assert sorted(w["hostname"] for w in result["workers"].values()) == list(COMPUTE), result
    assert_nothing_left()


def assert_no_route_out_warning(tmp_path: Path) -> None:
    """The compute hosts have no route out: Dask's search for one warned in every job's log
    before the scheduler took the address toward the job's hosts (hpcgpu.network.routed)."""
    for log in [*tmp_path.glob("*.out"), *tmp_path.glob("*.err")]:
        assert "Couldn't detect a suitable IP address" not in log.read_text(), log.read_text()[-3000:]


def mpi_over_both_hosts(tmp_path: Path, launcher: str, gpu_option: str) -> None:
    """``python -m hpcgpu.mpi`` started by ``launcher`` in a 2-node allocation (one task and
    one GPU a node, by ``gpu_option``) runs the checks on both compute hosts."""
    command = (f"{launcher} {PYTHON} -m hpcgpu.mpi --dashboard-address '' {CHECK} "
               "--expect 2 --json result.json")
    sbatch_and_wait(tmp_path, "-N2", "--ntasks-per-node=1", gpu_option,
                    "--export=ALL,OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                    "--wrap", command)
    assert_checked_on_both_hosts(tmp_path)
    assert_no_route_out_warning(tmp_path)
