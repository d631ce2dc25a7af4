"""``sbatch`` of jobscripts/slurm-2x4.sbatch on the real local SLURM (fake nodes and GPUs).

The file is submitted as it is; sbatch options on the command line shrink it to the
test's size (they take precedence over the #SBATCH lines), so the tests stay small.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from batchtools import CHECK, ROOT, processes_with, slurm_finished
from conftest import gpus_per_node, wait_for

pytestmark = pytest.mark.slurm

SCRIPT = ROOT / "jobscripts" / "slurm-2x4.sbatch"


def sbatch(tmp_path, nodes: int, gpus: int, *args: str, script=SCRIPT) -> str:
    argv = ["sbatch", "--parsable", f"--nodes={nodes}", f"--ntasks-per-node={gpus}",
            f"--gpus-per-node={gpus}", "--cpus-per-task=1", "--mem=2G", "--time=5",
            "--job-name=hpcgpu-batch-test", f"--chdir={tmp_path}",
            f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err",
            f"--export=ALL,HPCGPU_PYTHON={sys.executable}", str(script), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def logs(tmp_path, job_id: str) -> str:
    return "".join(p.read_text()[-4000:] for p in sorted(tmp_path.glob(f"{job_id}.*")) if p.exists())


def test_sbatch_runs_one_worker_per_gpu_on_two_nodes(slurm, tmp_path):
    job_id = sbatch(tmp_path, 2, 2, str(CHECK), "--expect", "4", "--json", "result.json")
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    assert state == ("COMPLETED", "0:0"), logs(tmp_path, job_id)
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(result["checks"].values()), result
    # one worker per (node, GPU): 2 fake nodes x GPUs 0 and 1, each worker's own
    # which GPUs is SLURM's choice: other jobs may hold GPUs 0 and 1
    assert gpus_per_node(result["places"].values()) == {0: 2, 1: 2}, result
    assert sorted(result["workers"]) == [f"{job_id}-{n}-{g}" for n in (0, 1) for g in (0, 1)]
    assert list((tmp_path / ".hpcgpu").iterdir()) == []
    # A clean end: the nannies stopped their workers before the scheduler closed.
    text = "".join(p.read_text() for p in sorted(tmp_path.glob(f"{job_id}.*")))
    assert "End worker" in text and "Traceback" not in text, text[-5000:]


def test_failing_script_fails_the_job_with_its_exit_code(slurm, tmp_path):
    job_id = sbatch(tmp_path, 1, 1, str(CHECK), "--expect", "1", "--exit-code", "3")
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    assert state == ("FAILED", "3:0"), logs(tmp_path, job_id)


def test_scancel_leaves_no_process_behind(slurm, tmp_path):
    job_id = sbatch(tmp_path, 1, 2, str(CHECK), "--marker", "started", "--sleep", "300")
    wait_for(lambda: (tmp_path / "started").exists() or slurm_finished(job_id), 180, 0.5,
             what="the script to start")
    marker = f"SLURM_JOB_ID={job_id}"
    running = processes_with(marker)
    assert len(running) >= 5, running  # batch shell's hpcgpu run, scheduler, srun, workers, script
    subprocess.run(["scancel", job_id], check=True, timeout=60)
    wait_for(lambda: slurm_finished(job_id), 120, 0.5, what=f"job {job_id} to end")
    wait_for(lambda: processes_with(marker) == [], 60, 0.5, what=f"the processes of job {job_id} to go")
