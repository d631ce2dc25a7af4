"""``qsub`` of jobscripts/sge-1x4.sge on the real local Grid Engine (fake GPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv

import pytest

from batchtools import CHECK, ROOT, job_output
from conftest import wait_for

pytestmark = pytest.mark.sge


def sge_exit_status(job_id: str) -> int | None:
    """The job's exit status from qacct once it has finished, else None."""
    if subprocess.run(["qstat", "-j", job_id], capture_output=True, text=True).returncode == 0:
        return None
    out = subprocess.run(["qacct", "-j", job_id], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("exit_status"):
            return int(line.split()[1])
    return None


@pytest.mark.parametrize("request_, gpus", [
    (["-pe", "smp", "2", "-l", "gpu=1"], 2),  # the consumable is per slot: 2 x 1
    (["-pe", "smp", "1", "-l", "gpu=3"], 3),  # one slot, three GPUs
], ids=["pe-smp-2-gpu-1", "pe-smp-1-gpu-3"])
def test_qsub_runs_one_worker_per_granted_gpu(sge, tmp_path, request_, gpus):
    # Command-line options shrink (or replace) the file's request.
    argv = ["qsub", "-terse", *request_, "-l", "h_rt=00:05:00",
            "-o", str(tmp_path), "-v", f"HPCGPU_PYTHON={sys.executable}",
            "-v", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", "-wd", str(tmp_path),
            str(ROOT / "jobscripts" / "sge-1x4.sge"), str(CHECK), "--expect", str(gpus),
            "--json", "r.json", "--exit-code", "7"]
    job_id = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    status = wait_for(lambda: sge_exit_status(job_id), 240, 0.5, what=f"SGE job {job_id}")
    logs = job_output(tmp_path, "*.o*")
    assert status == 7, logs[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    assert len({w["cuda_visible_devices"] for w in result["workers"].values()}) == gpus
    assert f"{gpus}/{gpus} worker(s) connected after" in logs  # progress in the job's log


def test_qsub_as_the_readme_says_finds_the_users_python(sge, tmp_path):
    """``qsub jobscripts/sge-1x4.sge my_analysis.py`` from a shell whose PATH has the user's
    environment first (an activated venv), nothing else: Grid Engine starts the job with
    its own PATH (the system python3: "No module named 'click'"); the script puts the
    submitter's (``SGE_O_PATH``) first."""
    env = {k: v for k, v in os.environ.items() if k not in ("HPCGPU_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"
    argv = ["qsub", "-terse", "-pe", "smp", "1", "-l", "gpu=1", "-l", "h_rt=00:05:00",
            "-o", str(tmp_path), "-wd", str(tmp_path), str(ROOT / "jobscripts" / "sge-1x4.sge"),
            str(CHECK), "--expect", "1", "--exit-code", "5"]
    job_id = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60,
                            env=env).stdout.strip()
    status = wait_for(lambda: sge_exit_status(job_id), 240, 0.5, what=f"SGE job {job_id}")
    logs = job_output(tmp_path, "*.o*")
    assert status == 5, logs[-3000:]  # the check script ran, under hpcgpu run, and said its code
    assert "1/1 worker(s) connected after" in logs, logs[-3000:]


def test_qsub_without_the_environment_says_what_to_do(sge, tmp_path):
    """#43: qsub from a shell whose python3 has no hpcgpu (a bare venv's first on PATH, no
    HPCGPU_PYTHON) fails at once, saying what to do, not 'No module named hpcgpu'."""
    venv.create(tmp_path / "bare", with_pip=False)
    env = {k: v for k, v in os.environ.items() if k not in ("HPCGPU_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{tmp_path / 'bare' / 'bin'}{os.pathsep}{env['PATH']}"
    argv = ["qsub", "-terse", "-pe", "smp", "1", "-l", "gpu=1", "-l", "h_rt=00:05:00",
            "-o", str(tmp_path), "-wd", str(tmp_path), str(ROOT / "jobscripts" / "sge-1x4.sge"),
            str(CHECK)]
    job_id = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60,
                            env=env).stdout.strip()
    status = wait_for(lambda: sge_exit_status(job_id), 240, 0.5, what=f"SGE job {job_id}")
    err = job_output(tmp_path, "*.o*")  # the script joins stderr to stdout
    assert status == 2, err
    python = tmp_path / "bare" / "bin" / "python3"
    assert err.startswith(f"hpcgpu: python3 ({python}) on "), err
    assert "has no hpcgpu: activate the environment that has hpcgpu before qsub, or qsub -v HPCGPU_PYTHON=" in err
