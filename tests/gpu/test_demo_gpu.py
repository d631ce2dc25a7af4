"""``hpcgpu demo``, the README's first command, on a GPU machine (marked ``gpu``): its
workers are GPU workers and every workload runs. It failed on one H200 before (the SVD's
plane put kept a lazy fused block; a worker without RMM died at start)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def test_the_demo_runs_every_workload_on_gpu_workers(tmp_path):
    pytest.importorskip("cupy")
    out = tmp_path / "demo.json"
    done = subprocess.run([sys.executable, "-m", "hpcgpu", "demo", "--json", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "GPU workers" in done.stdout.splitlines()[0], done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {r["workload"] for r in rows} == {"array-sum", "svd", "groupby"}, rows
    assert {r["backend"] for r in rows if r["workload"] != "groupby"} == {"cupy"}, rows
