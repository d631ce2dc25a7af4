"""``hpcgpu run --protocol ucx+auth`` on the real local SLURM: 2 fake nodes x 1 GPU, UCX over
TCP on loopback, the key in the job's 0700 directory; a plain ``ucx://`` peer is refused."""

from __future__ import annotations

from test_batch_ucx import pytestmark, ucx_batch  # noqa: F401 (the same marks)
from sourcetree import hide_entry_points


def test_sbatch_hpcgpu_run_protocol_ucx_auth(slurm, tmp_path, monkeypatch):
    """Run from a source tree as on the GPU machines: no package metadata names hpcgpu's
    backends in any process of the job (the script's own Client included)."""
    monkeypatch.setenv("PYTHONPATH", hide_entry_points(tmp_path / "site"))
    text = ucx_batch(tmp_path, "ucx+auth", "ucxauth_batch_script.py")
    assert "hpcgpu run: scheduler ucx+auth://127.0.0.1:" in text
    assert "RESULT ucx+auth://127.0.0.1:" in text and "key 0o600 plain refused" in text, text[-3000:]
    assert "own 42" in text, text[-3000:]
    logs = tmp_path / "cache" / "hpcgpu" / "logs"
    assert list(logs.glob(".hpcgpu-*/*")) == []  # the key went with the job directory
