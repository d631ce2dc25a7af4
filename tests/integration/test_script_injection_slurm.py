"""The reproduction of issue 26's break 3 on the real local SLURM: a ``log_directory`` with a
newline used to add a shell line to the job, which ran it."""

from __future__ import annotations

import pytest

from conftest import wait_for
from hpcgpu import SLURMCluster

pytestmark = pytest.mark.slurm


def test_log_directory_cannot_run_a_command_in_the_job(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where sbatch's default slurm-<id>.out would go
    marker = tmp_path / "pwned"
    bad = f"{tmp_path}/logs\ntouch {marker} #"
    cluster = None
    try:
        with pytest.raises(ValueError, match=r"log_directory=.*newline.*Remove it"):
            cluster = SLURMCluster(profile="local-gpu", log_directory=bad,
                                   job_name="inject-test", walltime="00:02:00")
            cluster.scale(jobs=1)
            # Before the fix: the job ran the injected line.
            wait_for(marker.exists, timeout=90, what="the injected command to run")
    finally:
        if cluster is not None:
            cluster.close()
    assert not marker.exists()
