"""``mpirun`` (Open MPI, not srun) across the site's two hosts for ``python -m hpcgpu.mpi``,
inside a 2-node allocation of the site's SLURM: Open MPI starts its daemon on the other
host through SLURM (its ``slurm`` launcher: ``srun`` runs the daemon), the ranks talk over
TCP between the hosts."""

from __future__ import annotations

import pytest
from site_helpers import mpi_over_both_hosts, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]


def test_hpcgpu_mpi_under_mpirun_over_two_hosts(tmp_path):
    mpi_over_both_hosts(tmp_path, "mpirun -n 2 --map-by ppr:1:node", "--gpus-per-node=1")
