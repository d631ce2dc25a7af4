"""``hpcgpu run --protocol ucx+auth`` on the real local SLURM: 2 fake nodes x 1 GPU, UCX over
TCP on loopback, the key in the job's 0700 directory; a plain ``ucx://`` peer is refused."""

from __future__ import annotations

import pytest

from batchtools import ROOT, slurm_finished
from conftest import wait_for
from hpcgpu.network import ucx_unavailable_reason
from test_batch_slurm import logs, sbatch

REASON = ucx_unavailable_reason()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(
    REASON is not None, reason=f"needs distributed-ucxx (pip install 'hpcgpu[ucx]'): {REASON}")]


def test_sbatch_hpcgpu_run_protocol_ucx_auth(slurm, tmp_path):
    job_id = sbatch(tmp_path, 2, 1, "--protocol", "ucx+auth", "--interface", "lo",
                    "--dashboard-address", "", str(ROOT / "tests" / "ucxauth_batch_script.py"))
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    assert state == ("COMPLETED", "0:0"), logs(tmp_path, job_id)
    text = "".join(p.read_text() for p in tmp_path.glob(f"{job_id}.*"))
    assert "hpcgpu run: scheduler ucx+auth://127.0.0.1:" in text
    assert "RESULT ucx+auth://127.0.0.1:" in text and "key 0o600 plain refused" in text, text[-3000:]
    assert not (tmp_path / ".hpcgpu").exists()  # the key went with the job directory
