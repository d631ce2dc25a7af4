"""Batch mode and hpcgpu's PBS directives on the real OpenPBS 23.06.06 (2 vnodes x 4 fake
GPUs; CUDA_VISIBLE_DEVICES from a mom hook; PBS_NODEFILE names the one mom, ``vm-pbs``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from batchtools import CHECK
from conftest import wait_for
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.resources import GPUJobShape

pytestmark = pytest.mark.pbs
PBS = get_dialect("pbs")


def finished(job_id: str) -> dict | None:
    """The job's ``qstat -x -f -F json`` record once it has finished (``F``), else None."""
    out = subprocess.run(["qstat", "-x", "-f", "-F", "json", job_id], capture_output=True,
                         text=True).stdout
    info = json.loads(out or "{}").get("Jobs", {}).get(job_id, {})
    return info if info.get("job_state") == "F" else None


def qsub(script: str, directory) -> str:
    path = directory / "job.pbs"
    path.write_text(script)
    return subprocess.run(["qsub", str(path)], capture_output=True, text=True, check=True,
                          cwd=directory, timeout=60).stdout.strip()


def test_hpcgpu_run_inside_a_pbs_job(pbs, tmp_path):
    """``hpcgpu run`` in a one-chunk job of 2 GPUs, no launcher named: a worker per GPU PBS
    gave (the hook's CUDA_VISIBLE_DEVICES), the script's exit code is the job's."""
    script = f"""#!/bin/bash
#PBS -N hpcgpu-run
#PBS -l select=1:ncpus=2:ngpus=2
#PBS -l walltime=00:05:00
#PBS -j oe
#PBS -o {tmp_path}/
cd "$PBS_O_WORKDIR"
exec {sys.executable} -m hpcgpu run {CHECK} --expect 2 --json r.json --exit-code 7
"""
    job_id = qsub(script, tmp_path)
    info = wait_for(lambda: finished(job_id), 120, 0.5, what=f"PBS job {job_id}")
    log = (tmp_path / f"{job_id}.OU").read_text()
    assert info["Exit_status"] == 7, log[-3000:]
    assert "through direct" in log, log[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    assert sorted(w["cuda_visible_devices"] for w in result["workers"].values()) == ["0", "1"]


def test_multi_vnode_job_as_hpcgpu_writes_it(pbs, tmp_path):
    """hpcgpu's directives for 2 nodes x 2 GPUs (``select=2:...:ngpus=2``, ``place=scatter``)
    on the real server: one chunk on each vnode, 2 GPUs each."""
    shape = GPUJobShape.create(nodes=2, gpus_per_node=2, cpus_per_gpu=1, memory_per_gpu="1GiB",
                               walltime="00:05:00")
    directives = "\n".join(PBS.directives(shape, str(tmp_path)))
    assert "#PBS -l select=2:ncpus=2:ngpus=2:mpiprocs=2:ompthreads=1:mem=2gb" in directives
    job_id = qsub(f'#!/bin/bash\n{directives}\necho "gpus=$PBS_FAKE_GPUS"\n', tmp_path)
    info = wait_for(lambda: finished(job_id), 60, 0.5, what=f"PBS job {job_id}")
    assert info["Exit_status"] == 0 and info["Resource_List"]["place"] == "scatter"
    chunks = info["exec_vnode"].split("+")
    assert sorted(c.split(":")[0].strip("(") for c in chunks) == ["pbsnode1", "pbsnode2"], chunks
    assert all("ngpus=2" in c for c in chunks)
    gpus = (tmp_path / f"{job_id}.OU").read_text().strip()
    assert sorted(part.split(":")[0] for part in gpus[len("gpus="):].split(";")) == [
        "pbsnode1", "pbsnode2"], gpus
