"""Batch mode across the site's hosts: ``hpcgpu run`` in a 2-node allocation of the site's
SLURM (scheduler on the first node, a worker on each, the script), submitted from ``login``."""

from __future__ import annotations

import pytest
from site_helpers import (  # noqa: F401
    CHECK, PYTHON, ROOT, assert_checked_on_both_hosts, assert_no_route_out_warning, assert_nothing_left,
    mpi_over_both_hosts, sbatch_and_wait, site)

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]


def run_check(tmp_path, *args: str, state: tuple[str, str] = ("COMPLETED", "0:0")) -> None:
    """examples/check_gpu_workers.py under ``hpcgpu run`` (jobscripts/slurm-2x4.sbatch)."""
    sbatch_and_wait(tmp_path, "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=1", "--cpus-per-task=1",
                    f"--error={tmp_path}/%j.err", f"--export=ALL,HPCGPU_PYTHON={PYTHON}",
                    str(ROOT / "jobscripts" / "slurm-2x4.sbatch"), str(CHECK), *args, state=state)


def test_hpcgpu_run_over_two_hosts(tmp_path):
    run_check(tmp_path, "--expect", "2", "--json", "result.json")
    assert_checked_on_both_hosts(tmp_path)
    assert_no_route_out_warning(tmp_path)


def test_the_scripts_exit_code_is_the_jobs(tmp_path):
    run_check(tmp_path, "--expect", "2", "--exit-code", "3", state=("FAILED", "3:0"))
    assert_nothing_left()


def test_hpcgpu_mpi_under_srun_over_two_hosts(tmp_path):
    mpi_over_both_hosts(tmp_path, "srun --mpi=pmix", "--gpus-per-task=1")
