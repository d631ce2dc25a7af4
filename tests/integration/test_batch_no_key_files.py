"""``hpcgpu run --no-key-files --launcher srun`` on the real SLURM, two nodes (#38: "where
the launcher allows, no key file at all"): srun gives each node's worker the certificate in
its environment; the job directory holds no key while the script computes."""

from __future__ import annotations

import sys

import pytest

from batchtools import job_output, sbatch_wrap, slurm_finished
from conftest import wait_for

pytestmark = pytest.mark.slurm

#: the script's client connects from its environment, computes on both nodes' workers, and
#: lists the job directory (HPCGPU_SCHEDULER_FILE lies in it)
SCRIPT = """
import os, pathlib
from distributed import Client
with Client(timeout="60s") as client:
    hosts = set(client.run(lambda: os.environ.get("SLURMD_NODENAME")).values())
    assert client.submit(sum, [1, 2]).result(timeout=60) == 3
    directory = pathlib.Path(os.environ["HPCGPU_SCHEDULER_FILE"]).parent
    print("nodes", len(hosts), "job directory", sorted(p.name for p in directory.iterdir()), flush=True)
"""


def test_two_nodes_compute_with_no_key_file(slurm, tmp_path):
    script = tmp_path / "no_files.py"
    script.write_text(SCRIPT)
    command = (f"{sys.executable} -m hpcgpu run --no-key-files --launcher srun --dashboard-address '' "
               f"--work-dir {tmp_path} {script}")
    job_id = sbatch_wrap(tmp_path, ["-N2", "--ntasks-per-node=1", "--gpus-per-node=1"], command)
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    output = job_output(tmp_path, f"{job_id}.out")
    assert state == ("COMPLETED", "0:0"), output[-4000:]
    assert "nodes 2 job directory ['owner', 'scheduler.json']" in output, output[-4000:]
    assert "scheduler tls://" in output
