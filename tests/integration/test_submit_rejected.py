"""A job that the batch scheduler rejects: one clear error with the scheduler's own message,
and no other traceback in the user's output (tested on the real local SLURM)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slurm

SCRIPT = textwrap.dedent("""
    import sys
    from hpcgpu import SLURMCluster
    # an unknown queue= is refused before submission (it is checked against sinfo); a
    # partition in the extra directives is not, and sbatch rejects the job
    cluster = SLURMCluster(gpus_per_node=1, job_extra_directives=["--partition=hpcgpu-no-such-partition"],
                           log_directory=sys.argv[1], walltime="00:05:00",
                           scheduler_options={"dashboard_address": "localhost:0"})
    cluster.scale(jobs=1)
    try:
        cluster.wait_for_workers(gpus=1, timeout=120)
    except RuntimeError as error:
        print("RAISED:", error)
    cluster.close()
    print("CLOSED")
""")


def test_a_rejected_sbatch_is_one_error_with_sbatchs_message(slurm, tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "logs")], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RAISED:" in done.stdout and "Invalid partition name specified" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("CLOSED")
    assert "Traceback" not in done.stderr and "Exception in callback" not in done.stderr, done.stderr
    # the log line, once: "submitting job ... failed: sbatch ...: sbatch: error: ..."
    assert done.stderr.count("Batch job submission failed: Invalid partition name specified") == 1, done.stderr
