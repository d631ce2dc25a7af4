"""The published-code benchmark without a GPU: the switch is two import lines, and the
``--cpu`` smoke run (NumPy/pandas, tiny sizes, no dask-cuda) runs and checks every step
on both sides. The GPU side is tests/gpu/test_published_code.py."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import published_code as pc  # noqa: E402


def test_hpcgpus_steps_are_the_published_text_with_two_import_lines_switched():
    published = pc.STEPS_FILE.read_text()
    switched = pc.switch(published, pc.IMPORTS)
    diff = [line for line in difflib.unified_diff(published.splitlines(), switched.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert sorted(diff) == sorted([f"-{old}" for old in pc.IMPORTS] + [f"+{new}" for new in pc.IMPORTS.values()])


def test_a_missing_import_line_is_an_error_naming_it():
    try:
        pc.switch("import numpy\n", {"import dask.array as da": "import hpcgpu.array as da"})
    except AssertionError as error:
        assert "import dask.array as da" in str(error)
    else:
        raise AssertionError("switch accepted a source without the line")


def test_cpu_smoke_runs_and_checks_every_step_on_both_sides(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/published_code.py", "--cpu", "--repeats", "1",
                           "--warmup", "0", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "published_code.json").read_text())
    assert result["mode"] == "cpu" and result["failed"] == []
    assert list(result["steps"]) == list(pc.STEPS)
    for name, row in result["steps"].items():
        for flavor in pc.FLAVORS:
            assert row[flavor]["median"] is not None, (name, flavor, row[flavor])
        assert row["ratio"] is not None
    table = (tmp_path / "published_code.md").read_text()
    assert all(f"| {name} |" in table for name in pc.STEPS), table


def test_the_table_has_a_pair_of_columns_per_variant_run():
    runs = [dict(flavor=f, warmup=False, steps={n: dict(seconds=s, check="ok") for n in pc.STEPS})
            for f, s in (("dask-cuda", 2.0), ("hpcgpu", 1.0), ("hpcgpu-tls", 3.0))]
    flavors = ["dask-cuda", "hpcgpu", "hpcgpu-tls"]
    steps = pc.summarize(runs, flavors)
    assert steps["persist"]["ratio"] == 0.5 and steps["persist"]["ratio_tls"] == 1.5
    assert steps["persist"]["ratio_tcp"] is None
    table = pc.markdown(dict(mode="gpu", sizes_name="quick", device="GPU", flavors=flavors, steps=steps,
                             slower=[], failed=[]))
    assert "hpcgpu TLS between workers / dask-cuda" in table and "TLS off" not in table
    assert "| persist | 2.000 | 1.000 | 0.50 | 3.000 | 1.50 | ok |" in table, table
