"""``scancel`` of an ``hpcgpu run`` job on the real local SLURM (KillWait 5 s there).

SLURM sends SIGTERM to every process of the job at once (the scheduler, the workers'
srun, the script and ``hpcgpu run``), then SIGKILL after KillWait. ``hpcgpu run`` must be
done before that: the job directory with the key files removed, and its own log saying it
ends with status 143 (128 + SIGTERM). A SIGKILL shows as ``ExitCode 0:9``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from batchtools import CHECK, processes_with, sbatch_wrap, slurm_finished
from conftest import wait_for

pytestmark = pytest.mark.slurm

RUN = f"{sys.executable} -m hpcgpu run --dashboard-address '' --timeout 240"


def test_scancel_ends_within_killwait_and_removes_the_key_files(slurm, tmp_path):
    work = tmp_path / "work"
    work.mkdir()  # a work folder of the user's stays; the job's own directory in it goes
    command = f"{RUN} --work-dir {work} {CHECK} --marker {tmp_path}/started --sleep 300"
    job_id = sbatch_wrap(tmp_path, ["-N1", "--ntasks-per-node=1", "--gpus-per-node=2"], command,
                         name="hpcgpu-cancel-test")
    try:
        wait_for(lambda: (tmp_path / "started").exists() or slurm_finished(job_id), 240, 0.2,
                 what="the script to start")
        assert list(work.glob("*/key.pem")), "the run's key file is where the test looks"
        started = time.monotonic()
        subprocess.run(["scancel", job_id], check=True, timeout=60)
        # slurmctld says CANCELLED at once; the job is gone when its last process is
        marker = f"SLURM_JOB_ID={job_id}"
        wait_for(lambda: processes_with(marker) == [], 60, 0.1, what=f"the processes of job {job_id} to go")
        took = time.monotonic() - started
        state = wait_for(lambda: slurm_finished(job_id), 60, 0.1, what=f"job {job_id} to end")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
    log = (tmp_path / f"{job_id}.out").read_text()
    assert state[0] == "CANCELLED", (state, log[-4000:])
    assert list(work.iterdir()) == [], log[-4000:]  # key.pem, cert.pem, ca.pem removed
    assert "hpcgpu run: stopped by SIGTERM: exit status 143" in log, log[-4000:]
    assert "distributed.client - ERROR" not in log, log[-4000:]  # no reconnect traceback
    print(f"scancel to the last process gone: {took:.1f} s")
    assert took < 5, (took, log[-4000:])  # SLURM's SIGKILL comes after KillWait (5 s here)


def test_gpurunner_scancel_removes_its_key_files(slurm, tmp_path):
    """scancel sends SIGTERM to every rank: rank 0 leaves its ``with`` block, closes the
    cluster and removes the TLS directory next to the scheduler file. (A SIGTERM to srun
    itself kills its tasks at once: nothing can remove anything then.)"""
    script = Path(__file__).with_name("batch_user_script.py")
    out, name = tmp_path / "out.json", f"hpcgpu-cancel-{uuid.uuid4().hex[:8]}"
    argv = ["srun", "--ntasks=2", "--gpus-per-task=1", "--cpus-per-task=1", "--mem=2G", "--time=5",
            f"--job-name={name}", sys.executable, str(script), str(out), "--runner", "--hold"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: Path(f"{out}.started").exists() or proc.poll() is not None, 240, 0.2,
                 what="the script to start")
        assert list(tmp_path.glob("*.tls/key.pem")), sorted(p.name for p in tmp_path.iterdir())
        subprocess.run(["scancel", "--name", name], check=True, timeout=60)
        log = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert not list(tmp_path.glob("*.tls")), log[-4000:]
    assert "Traceback" not in log, log[-4000:]
