"""``mpirun`` (Open MPI, not srun) across the site's two hosts for ``python -m hpcgpu.mpi``,
inside a 2-node allocation of the site's SLURM: Open MPI starts its daemon on the other
host through SLURM (its ``slurm`` launcher: ``srun`` runs the daemon), the ranks talk over
TCP between the hosts."""

from __future__ import annotations

import json

import pytest
from conftest import wait_for
from site_helpers import PYTHON, ROOT, assert_nothing_left, job_finished, job_logs, on_host, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

CHECK = ROOT / "examples" / "check_gpu_workers.py"


def test_hpcgpu_mpi_under_mpirun_over_two_hosts(tmp_path):
    command = (f"mpirun -n 2 --map-by ppr:1:node {PYTHON} -m hpcgpu.mpi --dashboard-address '' {CHECK} "
               "--expect 2 --json result.json")
    done = on_host("login", "sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--gpus-per-node=1",
                   "--mem=2G", "--time=5", f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out",
                   "--export=ALL,OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                   "--wrap", command, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    state = wait_for(lambda: job_finished(job_id), 120, 0.5, what=f"site job {job_id}")
    assert state == ("COMPLETED", "0:0"), job_logs(tmp_path, job_id)
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(result["checks"].values()), result
    assert sorted(w["hostname"] for w in result["workers"].values()) == ["node1", "node2"], result
    assert_nothing_left()
