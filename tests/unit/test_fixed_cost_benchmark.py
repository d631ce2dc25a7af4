"""benchmarks/fixed_cost.py runs at smoke size and writes every row with every phase."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_fixed_cost_benchmark_writes_all_rows(tmp_path):
    out = tmp_path / "fixed_cost.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / "fixed_cost.py"), "--smoke", "--json", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert sorted(rows) == ["distributed tls 2x2 blocks", "distributed tls one-task round trip",
                            "hpcgpu tls 2x2 blocks", "hpcgpu tls array-sum 16x16 blocks"]
    # 256 generated blocks fused into a few tasks; the same small graph on both
    assert rows["hpcgpu tls array-sum 16x16 blocks"]["tasks"] < 40
    assert rows["hpcgpu tls 2x2 blocks"]["tasks"] == rows["distributed tls 2x2 blocks"]["tasks"] > 1
    for name, row in rows.items():
        assert row["runs"] == 2 and row["total"] > 0, (name, row)
        if "round trip" not in name:
            assert set(row) >= {"build", "submit", "opt", "ser", "mat", "state", "dispatch", "compute"}
            assert 0 < row["compute"] <= row["total"] and row["mat"] > 0, (name, row)
    assert "hpcgpu tls array-sum 16x16 blocks" in done.stdout  # the table


def test_fixed_cost_pieces_names_each_step():
    argv = [sys.executable, str(ROOT / "benchmarks" / "fixed_cost.py"), "--pieces", "--smoke"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    pieces = json.loads(done.stdout)
    assert set(pieces) == {"build", "pickle", "unpickle", "dask blockwise fusion", "hpcgpu cull and lazy blocks",
                           "hpcgpu tree fusion", "hpcgpu optimiser, whole"}
    assert all(ms >= 0 for ms in pieces.values())
