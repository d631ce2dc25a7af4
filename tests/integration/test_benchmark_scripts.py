"""Every maintained script of benchmarks/ runs: a smoke run at tiny sizes on the CPU.

The figures are not asserted (they are records, benchmarks/results/); what is checked is
that each script starts, runs its cases and writes what benchmarks/README.md says it
writes. Scripts that need a GPU (CuPy, NVML) are compiled here, and named in the README.
"""

from __future__ import annotations

import json
import os
import py_compile
import re
import subprocess
import sys

import pytest

from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*") if p.suffix in (".py", ".sh") and "results" not in p.parts)


def run(*argv: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_every_script_compiles_and_the_readme_names_it():
    readme = (BENCHMARKS / "README.md").read_text()
    for script in SCRIPTS:
        if script.suffix == ".py":
            py_compile.compile(str(script), doraise=True)
        assert str(script.relative_to(BENCHMARKS)) in readme, f"benchmarks/README.md does not describe {script}"


def test_task_overhead_fuses_the_graph_into_fewer_tasks():
    done = run("benchmarks/task_overhead.py", "--blocks", "16", "--runs", "1")
    tasks = dict(map(int, pair) for pair in re.findall(r"fuse-width +(\d+): +(\d+) tasks", done.stdout))
    assert set(tasks) == {0, 16} and tasks[16] < tasks[0], done.stdout


def test_bench_script_runs_a_sweep(tmp_path):
    run("benchmarks/bench.py", "noop", "--size", "tiny", "--gpus", "1", "--repeats", "1", "--warmup", "0",
        "--out", str(tmp_path))
    runs = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert runs and all(r["status"] == "ok" and r["workload"] == "noop" for r in runs)


def test_worker_startup_times_every_design():
    done = run("benchmarks/worker_startup.py", "--gpus", "1", "--runs", "1", "--no-tls")
    for design in ("task/GPU", "node, spawn", "node, forkserver", "node, forked-server", "dask worker"):
        assert f"| {design} |" in done.stdout, done.stdout


def test_noop_phases_prints_the_phases_of_three_runs():
    done = run("benchmarks/gpu/noop_phases.py")
    lines = [line for line in done.stdout.splitlines() if " wall " in line]
    assert len(lines) == 3 and all("materialize" in line and "first_task" in line for line in lines), done.stdout


def test_gc_pauses_reports_each_repeat_and_the_noop_graphs():
    done = run("benchmarks/gpu/gc_pauses.py", "400", "20", "2", "cpu", "client")
    assert "freeze=client" in done.stdout
    assert [line.split()[0] for line in done.stdout.splitlines() if " wall " in line] == ["sum"] * 2 + ["noop"] * 3


@pytest.mark.slurm
def test_bootstrap_on_the_local_slurm(slurm, tmp_path):
    out = tmp_path / "bootstrap.json"
    run("benchmarks/bootstrap.py", "--runs", "1", "--gpus", "4", "--out", str(out), timeout=540)
    data = json.loads(out.read_text())["data"]
    # hpcgpu, dask-jobqueue and hpcgpu with one task per GPU, one run each, and their ratios
    timed = {label: entry for label, entry in data.items() if isinstance(entry, dict)}
    assert len(timed) == 3 and all(len(entry["seconds"]) == 1 for entry in timed.values()), data
    assert "ratio hpcgpu N=4" in data, data


@pytest.mark.slurm
def test_submit_throughput_on_the_local_slurm(slurm, tmp_path):
    _submit_throughput("slurm", tmp_path)


@pytest.mark.sge
def test_submit_throughput_on_the_local_grid_engine(sge, tmp_path):
    _submit_throughput("sge", tmp_path)


def _submit_throughput(scheduler: str, tmp_path) -> None:
    out = tmp_path / "submit.json"
    # --poll-interval 0.2: its window of ten status polls per mode lasts 2 s (1 s polls: 10 s)
    run("benchmarks/submit_throughput.py", "--jobs", "3", "--mode", "both", "--scheduler", scheduler,
        "--poll-interval", "0.2", "--log-directory", str(tmp_path / "logs"), "--out", str(out))
    runs = json.loads(out.read_text())["runs"]
    assert [(r["mode"], r["jobs"], r["submit_calls"], r["cancel_calls"]) for r in runs] == [
        ("single", 3, 3, 1), ("array", 3, 1, 1)]


def test_transport_probe_measures_every_side(tmp_path):
    run("benchmarks/transport_probe.py", "--smoke", "--out", str(tmp_path / "t.jsonl"))
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    sides = [line["side"] for line in lines]
    assert sides == ["host", "raw socket", "raw ssl", "comm tcp", "comm tls", "comm unix-kernel-buffers",
                     "comm unix"], sides
    assert all(rate > 0 for line in lines[1:] for rate in line["gib_s"])
