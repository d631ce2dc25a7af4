"""Batch mode across the site's hosts: ``hpcgpu run`` in a 2-node allocation of the site's
SLURM (scheduler on the first node, a worker on each, the script), submitted from ``login``."""

from __future__ import annotations

import json
import re

import pytest
from conftest import wait_for
from site_helpers import PYTHON, ROOT, assert_nothing_left, on_host, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

CHECK = ROOT / "examples" / "check_gpu_workers.py"


def submit(tmp_path, *args: str) -> str:
    done = on_host("login", "sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1",
                   "--gpus-per-node=1", "--cpus-per-task=1", "--mem=2G", "--time=5",
                   f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err",
                   f"--export=ALL,HPCGPU_PYTHON={PYTHON}", str(ROOT / "jobscripts" / "slurm-2x4.sbatch"),
                   str(CHECK), *args, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def finished(job_id: str) -> tuple[str, str] | None:
    text = on_host("login", "scontrol", "show", "job", job_id, timeout=30).stdout
    state, code = re.search(r"JobState=(\S+)", text), re.search(r"\bExitCode=(\S+)", text)
    if state and state.group(1) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
        return state.group(1), code.group(1)
    return None


def logs(tmp_path, job_id: str) -> str:
    return "".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob(f"{job_id}.*")))


def test_hpcgpu_run_over_two_hosts(tmp_path):
    job_id = submit(tmp_path, "--expect", "2", "--json", "result.json")
    state = wait_for(lambda: finished(job_id), 120, 0.5, what=f"site job {job_id}")
    assert state == ("COMPLETED", "0:0"), logs(tmp_path, job_id)
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(result["checks"].values()), result
    assert sorted(w["hostname"] for w in result["workers"].values()) == ["node1", "node2"], result
    assert_nothing_left()


def test_the_scripts_exit_code_is_the_jobs(tmp_path):
    job_id = submit(tmp_path, "--expect", "2", "--exit-code", "3")
    state = wait_for(lambda: finished(job_id), 120, 0.5, what=f"site job {job_id}")
    assert state == ("FAILED", "3:0"), logs(tmp_path, job_id)
    assert_nothing_left()


def test_hpcgpu_mpi_under_srun_over_two_hosts(tmp_path):
    command = (f"srun --mpi=pmix {PYTHON} -m hpcgpu.mpi --dashboard-address '' {CHECK} "
               "--expect 2 --json result.json")
    done = on_host("login", "sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--gpus-per-task=1",
                   "--mem=2G", "--time=5", f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out",
                   "--export=ALL,OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                   "--wrap", command, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    state = wait_for(lambda: finished(job_id), 120, 0.5, what=f"site job {job_id}")
    assert state == ("COMPLETED", "0:0"), logs(tmp_path, job_id)
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(result["checks"].values()), result
    assert sorted(w["hostname"] for w in result["workers"].values()) == ["node1", "node2"], result
    assert_nothing_left()
