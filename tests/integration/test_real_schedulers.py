"""Rendered scripts against the real local SLURM and Grid Engine (scripts/setup-schedulers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for

from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.examples import EXAMPLES, render_examples
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import JobScript, render
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.system import commands

pytestmark = pytest.mark.slurm

REPORT = "echo task=${SLURM_PROCID:-x} node=${SLURMD_NODENAME:-x} cvd=${CUDA_VISIBLE_DEVICES:-none}"


def submit(dialect, text: str, path: Path) -> str:
    path.write_text(text)
    result = commands.run(dialect.submit_argv(str(path)), timeout=60)
    return dialect.parse_job_id(result.stdout)


def slurm_job_done(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
    return out.strip() in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


@pytest.mark.parametrize("filename", sorted(f for f in EXAMPLES if f.startswith("slurm")))
def test_slurm_examples_pass_sbatch_test_only(slurm, tmp_path, filename):
    path = tmp_path / filename
    path.write_text(render_examples()[filename])
    result = commands.run(get_dialect("slurm").check_argv(str(path)), timeout=60)
    assert "to start at" in result.stderr + result.stdout


def test_cli_jobscript_check_accepted_by_sbatch(slurm):
    argv = [sys.executable, "-m", "hpcgpu", "jobscript", "slurm", "--nodes", "2",
            "--gpus-per-node", "4", "--cpus-per-gpu", "8", "--memory-per-gpu", "60GB",
            "--walltime", "01:00:00", "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "accepted by slurm" in done.stderr
    assert "#SBATCH --gpus-per-node=4" in done.stdout


def test_cli_refuses_bad_shape_before_submitting(slurm):
    # a name of its own: other tests (in parallel) submit jobs of their own meanwhile
    name = f"hpcgpu-refused-{os.getpid()}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "hpcgpu", "jobscript", "slurm", "--gpus-per-node", "0", "--check",
            "--job-name", name]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "gpus_per_node=0" in done.stderr and "#SBATCH" not in done.stdout
    listed = subprocess.run(["squeue", "-h", "--states=all", "-n", name, "-o", "%i"],
                            capture_output=True, text=True, check=True).stdout
    assert listed == ""


def test_slurm_refuses_what_the_site_lacks(slurm, tmp_path):
    shape = GPUJobShape.create(gpus_per_node=8)  # the fake nodes have 4 GPUs
    path = tmp_path / "too-big.sh"
    path.write_text(render(JobScript(shape, get_dialect("slurm"), get_launcher("srun"), "true")))
    with pytest.raises(commands.CommandError, match="Requested node configuration is not available"):
        commands.run(get_dialect("slurm").check_argv(str(path)))


def test_two_node_script_runs_one_task_per_gpu(slurm, tmp_path):
    shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=1, memory_per_gpu="1GiB",
                               walltime=5, job_name="hpcgpu-test-2x4")
    by_node = _run_two_node_tasks(shape, get_launcher("srun", one_task_per="gpu"), tmp_path)
    assert sum(len(gpus) for gpus in by_node.values()) == 8, by_node
    for node, gpus in by_node.items():
        assert sorted(gpus) == ["0", "1", "2", "3"], (node, gpus)


def test_two_node_script_runs_one_task_per_node_with_all_its_gpus(slurm, tmp_path):
    """The default: one srun task per node, which sees all 4 of its node's GPUs (and then
    gives one to each of its workers)."""
    shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=1, memory_per_gpu="1GiB",
                               walltime=5, job_name="hpcgpu-test-2x4")
    by_node = _run_two_node_tasks(shape, get_launcher("srun"), tmp_path)
    assert {node: gpus for node, gpus in by_node.items()} == {
        node: ["0,1,2,3"] for node in by_node}, by_node


def _run_two_node_tasks(shape, launcher, tmp_path) -> dict[str, list[str]]:
    dialect = get_dialect("slurm")
    script = JobScript(shape, dialect, launcher, f"bash -c '{REPORT}'", log_directory=str(tmp_path))
    job_id = submit(dialect, render(script), tmp_path / "job.sh")
    wait_for(lambda: slurm_job_done(job_id), 120, what=f"job {job_id}")
    out = wait_for(lambda: (tmp_path / f"hpcgpu-test-2x4-{job_id}.out").read_text().strip(), 30, what="output")
    by_node: dict[str, list[str]] = {}
    for line in sorted(out.splitlines()):
        fields = dict(kv.split("=") for kv in line.split())
        by_node.setdefault(fields["node"], []).append(fields["cvd"])
    assert len(by_node) == 2, by_node
    return by_node


@pytest.mark.sge
def test_sge_examples_pass_qsub_verify(sge, tmp_path):
    path = tmp_path / "sge-1x4.sh"
    path.write_text(render_examples()["sge-1x4.sh"])
    result = commands.run(get_dialect("sge").check_argv(str(path)), timeout=60)
    assert "found suitable queue" in result.stdout + result.stderr


@pytest.mark.sge
def test_sge_script_runs_and_gets_its_gpu_slots(sge, tmp_path):
    shape = GPUJobShape.create(gpus_per_node=2, walltime=5, job_name="hpcgpu-sge-test")
    dialect = get_dialect("sge")
    body = "echo slots=$NSLOTS cvd=${CUDA_VISIBLE_DEVICES:-none}"
    script = JobScript(shape, dialect, get_launcher("direct"), body, log_directory=str(tmp_path))
    job_id = submit(dialect, render(script), tmp_path / "job.sh")

    def finished():
        return subprocess.run(["qstat", "-j", job_id], capture_output=True).returncode != 0

    wait_for(finished, 120, what=f"SGE job {job_id}")
    out = wait_for(lambda: (tmp_path / f"hpcgpu-sge-test.o{job_id}").read_text().strip(), 30, what="output")
    fields = dict(kv.split("=") for kv in out.split())
    assert fields["slots"] == "2"
    gpus = fields["cvd"].split(",")
    assert len(gpus) == 2 and len(set(gpus)) == 2, out
