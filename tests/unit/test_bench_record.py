"""One record, one figure: docs/benchmarks.md's GPU table is what ``hpcgpu bench --from-jsonl``
draws from the record it names (benchmarks/results/h200x4/bench.jsonl), row by row."""

from __future__ import annotations

import re

from click.testing import CliRunner

from docblocks import ROOT
from hpcgpu.cli import main

RECORD = ROOT / "benchmarks" / "results" / "h200x4" / "bench.jsonl"


def _cli_rows(out) -> dict:
    """(workload, cluster, protocol, GPUs) -> (median s, efficiency) of the CLI's table."""
    rows = {}
    for line in (out / "table.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 13 and cells[4].isdigit():
            rows[cells[0], cells[2], cells[3], int(cells[4])] = (cells[8], cells[12])
    return rows


def _doc_rows() -> dict:
    """The same keys from the page's table (a blank workload cell repeats the one above)."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    table = page.split("## GPU results", 1)[1]
    rows, workload = {}, None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or not cells[2].isdigit():
            continue
        workload = cells[0].split()[0] if cells[0] else workload
        protocol, gpus = cells[1], int(cells[2])
        rows[workload, "hpcgpu", protocol, gpus] = (cells[3], cells[4])
        if re.match(r"[\d.]+$", cells[5]):
            rows[workload, "dask-cuda", protocol, gpus] = (cells[5], cells[6])
    return rows


def _same(doc: str, cli: str) -> bool:
    return float(doc) == float(cli) or f"{float(doc):.3g}" == f"{float(cli):.3g}"


def test_the_pages_gpu_table_is_what_the_cli_draws_from_its_record(tmp_path):
    done = CliRunner().invoke(main, ["bench", "--from-jsonl", str(RECORD), "--out", str(tmp_path)])
    assert done.exit_code in (0, 3), done.output  # 3: the record holds failed runs, reported
    cli, doc = _cli_rows(tmp_path), _doc_rows()
    assert len(doc) == 21 and (tmp_path / "plots" / "array-sum-strong.png").exists()
    wrong = {key: (value, cli.get(key)) for key, value in doc.items()
             if key not in cli or not _same(value[0], cli[key][0]) or value[1] != cli[key][1]}
    assert not wrong, f"docs/benchmarks.md (page, CLI): {wrong}"
