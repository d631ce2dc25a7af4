"""benchmarks/block_overhead.py runs at smoke size: a row per side, workload and size, and the overhead per block."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_block_overhead_writes_every_row_and_the_overhead(tmp_path):
    out = tmp_path / "block_overhead.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / "block_overhead.py"), "--smoke",
            "--workloads", "array-sum,persisted-mean", "--json", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    cases = {(r["side"], r["workload"], r["blocks"]) for r in record["rows"]}
    assert cases == {(s, w, b) for s in ("hpcgpu", "distributed") for w in ("array-sum", "persisted-mean")
                     for b in (4, 16)}
    assert all(r["tasks"] >= 1 and r["compute"] > 0 and r["runs"] == 1 for r in record["rows"])
    assert {(o["side"], o["workload"]) for o in record["overhead_per_block"]} == {
        (s, w) for s, w, _ in cases}
    assert "overhead per input block" in done.stdout
