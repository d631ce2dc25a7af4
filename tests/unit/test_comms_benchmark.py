"""benchmarks/comms.py's plumbing without a GPU (NumPy chunks, UCX on loopback), so the
script the GPU machine runs has run before it gets there."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT
from ucx_marks import needs_ucx


@needs_ucx
def test_comms_benchmark_runs_a_ucx_case_and_writes_its_results(tmp_path):
    argv = [sys.executable, str(ROOT / "benchmarks" / "comms.py"), "--cpu", "--gpus", "2",
            "--size", "400", "--chunk", "100", "--repeat", "1", "--warmup", "0",
            "--p2p-sizes", "1MiB", "--cases", "hpcgpu-ucx", "--interface", "lo", "--out", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr + (tmp_path / "case-hpcgpu-ucx.log").read_text()
    report = json.loads((tmp_path / "comms.json").read_text())
    (record,) = report["records"]
    # (x + x.T).sum() = 2 * x.sum() for uniform [0, 1) numbers: about 400 * 400
    assert 150_000 < record["transpose_sum"]["value"] < 170_000
    # a fresh x per repeat: the transpose moves off-diagonal chunks between the 2 workers
    assert all(moved > 0 for moved in record["transpose_sum"]["bytes_moved"]), record["transpose_sum"]
    assert sorted(w["cuda_visible_devices"] for w in record["workers"].values()) == ["0", "1"]
    assert all(address.startswith("ucx://127.0.0.1:") for address in record["workers"])
    assert record["p2p"][0]["bytes"] == 2**20 and record["p2p"][0]["transfer_gib_per_s"] > 0
    assert "| hpcgpu-ucx |" in (tmp_path / "comms.md").read_text()
