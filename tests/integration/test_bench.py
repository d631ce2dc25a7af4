"""The benchmark harness on the CPU: records, aggregation, tables, plots, failures, CLI.

Everything runs on real Dask clusters of this machine at tiny sizes; no GPU needed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from hpcgpu.bench.records import Environment, RunRecord
from hpcgpu.bench.registry import Size, Workload
from hpcgpu.bench.report import markdown_table, read_csv, read_jsonl, append_jsonl, write_csv
from hpcgpu.bench.runner import SweepSpec, run_sweep, write_outputs
from hpcgpu.bench.stats import ratios, summarize
from hpcgpu.bench.targets import ExistingTarget, LocalTarget

HPCGPU = [sys.executable, "-m", "hpcgpu"]


def record(gpus, seconds, repeat=0, *, work=100.0, scaling="strong", cluster="hpcgpu",
           warmup=False, error=None):
    return RunRecord(
        sweep="t", workload="w", scaling=scaling, gpus=gpus, size=f"{work}", work=work,
        work_unit="B", repeat=repeat, warmup=warmup, status="failed" if error else "ok",
        seconds=None if error else seconds, error=error,
        env=Environment(cluster=cluster, versions=(("numpy", "2"),)))


def test_strong_scaling_aggregation_matches_hand_computed_values():
    runs = [record(1, t, i) for i, t in enumerate([10.0, 2.0, 8.0, 6.0, 4.0])]
    runs += [record(1, 100.0, 0, warmup=True)]  # warm-up: recorded, never aggregated
    runs += [record(2, t, i) for i, t in enumerate([4.0, 3.0, 3.5])]
    runs += [record(4, None, 0, error="RuntimeError: boom"), record(4, 2.0, 1)]
    one, two, four = summarize(runs)
    # 1 GPU: sorted 2 4 6 8 10 -> median 6, q1 4, q3 8 (linear interpolation)
    assert (one.median, one.q1, one.q3, one.iqr, one.ok, one.failed) == (6.0, 4.0, 8.0, 4.0, 5, 0)
    assert one.throughput == pytest.approx(100 / 6)
    assert (one.speedup, one.efficiency) == (1.0, 1.0)
    # 2 GPUs: sorted 3 3.5 4 -> median 3.5, q1 3.25, q3 3.75
    assert (two.median, two.q1, two.q3) == (3.5, 3.25, 3.75)
    assert two.speedup == pytest.approx(6 / 3.5)
    assert two.efficiency == pytest.approx(6 / (2 * 3.5))
    # 4 GPUs: one failed run counted, the other aggregated
    assert (four.ok, four.failed, four.median, four.error) == (1, 1, 2.0, "RuntimeError: boom")
    assert four.efficiency == pytest.approx(6 / (4 * 2.0))


def test_weak_scaling_efficiency_is_time_ratio():
    # work doubles with the GPUs; 1 GPU 2.0 s, 2 GPUs 2.5 s -> efficiency 2.0 / 2.5
    runs = [record(1, 2.0, work=100.0, scaling="weak"), record(2, 2.5, work=200.0, scaling="weak")]
    base, two = summarize(runs)
    assert two.efficiency == pytest.approx(0.8)
    assert two.speedup == pytest.approx(1.6)
    assert base.throughput == 50.0 and two.throughput == 80.0


def test_ratios_pair_primary_with_each_reference():
    runs = [record(1, 2.0), record(1, 8.0, cluster="dask-cuda"), record(1, 4.0, cluster="plain")]
    got = {r.reference: r.ratio for r in ratios(summarize(runs))}
    assert got == {"dask-cuda": 0.25, "plain": 0.5}


def test_results_round_trip_through_jsonl_and_csv(tmp_path):
    runs = [record(1, 1.5), record(2, None, 1, error="ValueError: x, y")]
    for r in runs:
        append_jsonl(tmp_path / "r.jsonl", r)
    write_csv(tmp_path / "r.csv", runs)
    assert read_jsonl(tmp_path / "r.jsonl") == runs
    assert read_csv(tmp_path / "r.csv") == runs
    first = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert first["versions"] == "numpy=2" and first["status"] == "ok" and first["gpu_model"] is None


def test_plots_are_valid_png_images(tmp_path):
    import matplotlib.image

    runs = [record(1, 4.0), record(2, 2.5), record(4, 1.5), record(1, 5.0, cluster="plain")]
    paths = write_outputs(runs, tmp_path)
    png = tmp_path / "plots" / "w-strong.png"
    assert paths["plot:w-strong"] == png
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 100 and width > 100


def test_without_matplotlib_the_tables_are_written_and_say_why_no_plots(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    paths = write_outputs([record(1, 4.0), record(2, 2.5)], tmp_path)
    assert sorted(paths) == ["csv", "table"] and not (tmp_path / "plots").exists()
    assert "No plots: matplotlib is not installed" in (tmp_path / "table.md").read_text()


def _flaky(ctx, size, state):
    """Fails on the worker on its second call: a real remote exception."""
    state.append(1)

    def task(n):
        if n == 2:
            raise RuntimeError("deliberate failure in run 2")
        return n

    ctx.client.submit(task, len(state), pure=False).result()


FLAKY = Workload("flaky", "fails in its second run", "graph",
                 lambda preset, gpus, scaling: Size("one task", 1.0, "tasks"), _flaky,
                 prepare=lambda ctx, size: [])
BROKEN = Workload("broken", "prepare fails", "graph",
                  lambda preset, gpus, scaling: Size("none", 1.0, "tasks"), _flaky,
                  prepare=lambda ctx, size: 1 / 0)


def test_a_failed_run_is_recorded_and_reported_as_failed(tmp_path):
    spec = SweepSpec(("flaky", "broken"), (1,), repeats=3, warmup=0)
    seen = []
    runs = run_sweep(spec, [LocalTarget()], {"flaky": FLAKY, "broken": BROKEN}, sink=seen.append)
    assert seen == runs
    flaky = [r for r in runs if r.workload == "flaky"]
    assert [r.status for r in flaky] == ["ok", "failed", "ok"]
    assert "deliberate failure in run 2" in flaky[1].error and flaky[1].seconds is None
    broken = [r for r in runs if r.workload == "broken"]
    assert len(broken) == 3 and all(r.status == "failed" and "ZeroDivisionError" in r.error for r in broken)
    table = markdown_table(summarize(runs))
    assert "| 2 ok, 1 failed |" in table
    assert "FAILED: prepare: ZeroDivisionError" in table


def test_existing_scheduler_sweep_uses_only_n_of_its_workers():
    from distributed import LocalCluster, get_worker

    used = []

    def where(ctx, size, state):
        futures = [ctx.submit(lambda i: get_worker().address, i) for i in range(8)]
        used.append((ctx.gpus, set(ctx.client.gather(futures))))

    probe = Workload("where", "records the workers used", "graph",
                     lambda preset, gpus, scaling: Size("8 tasks", 8.0, "tasks"), where)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        target = ExistingTarget(address=cluster.scheduler_address)
        runs = run_sweep(SweepSpec(("where",), (1, 2), repeats=1, warmup=0), [target], {"where": probe})
        target.shutdown()
    assert [len(workers) for _, workers in used] == [1, 2]
    assert all(r.ok and r.env.path == "scheduler" for r in runs)
    with pytest.raises(ValueError, match="needs a cluster the harness starts"):
        run_sweep(SweepSpec(("bootstrap",), (1,)), [ExistingTarget(address="tcp://127.0.0.1:1")])


_EXECUTED: list = []  # appended by the tasks below: the cluster runs in this process
_KEPT: list = []


def _counted(n):
    _EXECUTED.append(n)
    return n


def _same_graph(ctx, size, state):
    """The same keys every run, as a workload's graph of the same persisted inputs."""
    import dask

    ctx.persist(dask.delayed(_counted, pure=True)(1))


def _keeps_its_results(ctx, size, state):
    import dask

    _KEPT.append(ctx.persist(dask.delayed(_counted, pure=True)(2)))


def test_every_run_computes_its_graph_and_one_that_keeps_its_results_fails():
    """The next run submits the same keys: while the last run's results were still in
    memory it found them there and measured nothing (Dask's svd in 0.015 s of 1 s). Each
    run now waits, untimed, until the scheduler has forgotten them."""
    from distributed import LocalCluster

    def size(preset, gpus, scaling):
        return Size("one task", 1.0, "tasks")

    same = Workload("same", "the same graph every run", "graph", size, _same_graph)
    keeps = Workload("keeps", "keeps its results", "graph", size, _keeps_its_results)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        target = ExistingTarget(address=cluster.scheduler_address)
        runs = run_sweep(SweepSpec(("same", "keeps"), (1,), repeats=2, warmup=1, timeout=1),
                         [target], {"same": same, "keeps": keeps})
        target.shutdown()
    assert [r.status for r in runs if r.workload == "same"] == ["ok"] * 3
    assert _EXECUTED.count(1) == 3  # the warm-up and 2 runs: each computed
    kept = [r for r in runs if r.workload == "keeps"]
    assert kept[0].status == "failed" and "still held after 1 s" in kept[0].error, kept[0]
    _KEPT.clear()


def test_cli_end_to_end_on_a_local_cpu_cluster(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [*HPCGPU, "bench", "array-sum,groupby,bootstrap", "--size", "tiny", "--gpus", "1,2",
         "--repeats", "2", "--warmup", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = read_jsonl(out / "results.jsonl")
    # 3 workloads x 2 GPU counts x (1 warm-up + 2 runs), every one ok
    assert len(runs) == 18 and all(r.ok for r in runs)
    assert read_csv(out / "results.csv") == runs
    assert {r.env.backend for r in runs} == {"numpy/pandas (hpcgpu)"}
    assert {(r.gpus, r.env.nodes) for r in runs} == {(1, 1), (2, 1)}
    table = (out / "table.md").read_text()
    assert "| array-sum | strong | hpcgpu | tcp | 2 | 1 | 2000x2000 chunk 500 | 2 ok |" in table
    assert "hpcgpu bench array-sum,groupby,bootstrap" in table
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "array-sum-strong.png", "bootstrap-weak.png", "groupby-strong.png"]


def test_cli_compare(tmp_path):
    # batch mode (DASK_SCHEDULER_ADDRESS): test_all_in_batch_mode_leaves_out_bootstrap_and_says_so
    done = subprocess.run(
        [*HPCGPU, "bench", "array-sum", "--size", "tiny", "--repeats", "2", "--warmup", "0",
         "--compare", "plain", "--out", str(tmp_path / "cmp")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = read_jsonl(tmp_path / "cmp" / "results.jsonl")
    assert {r.env.cluster for r in runs} == {"hpcgpu", "plain"} and all(r.ok for r in runs)
    table = (tmp_path / "cmp" / "table.md").read_text()
    assert {r.env.backend for r in runs if r.ok} == {"numpy/pandas (hpcgpu)", "numpy/pandas (dask)"}
    assert "| array-sum | strong | tcp | 1 | plain |" in table


@pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is not None, reason="dask-cuda is installed")
def test_compare_dask_cuda_without_dask_cuda_says_what_to_install(tmp_path):
    """In this process (click's runner), as the refusals below: no interpreter of its own."""
    from click.testing import CliRunner

    from hpcgpu.cli import main

    done = CliRunner().invoke(main, ["bench", "array-sum", "--size", "tiny", "--compare", "dask-cuda",
                                     "--out", str(tmp_path / "x")])
    # exit code 2 from click's refusal, not an exception that escaped (a traceback)
    assert done.exit_code == 2 and isinstance(done.exception, SystemExit), (done.stderr, done.exception)
    assert "Traceback" not in done.stderr, done.stderr
    assert "--compare dask-cuda needs the dask-cuda package" in done.stderr
    assert "pip install 'hpcgpu[cuda12]'" in done.stderr
    assert not (tmp_path / "x").exists()  # refused before anything ran


def test_all_in_batch_mode_leaves_out_bootstrap_and_says_so(tmp_path):
    """Batch mode: the sweep uses the scheduler named by DASK_SCHEDULER_ADDRESS (every record's
    path is "batch"); ``all`` there runs every workload but bootstrap (noop among them)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster:
        env = {**os.environ, "DASK_SCHEDULER_ADDRESS": cluster.scheduler_address}
        done = subprocess.run([*HPCGPU, "bench", "all", "--size", "tiny", "--repeats", "1",
                               "--warmup", "0", "--timeout", "120", "--out", str(tmp_path / "all")],
                              capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "all: leaving out bootstrap" in done.stderr
    runs = read_jsonl(tmp_path / "all" / "results.jsonl")
    names = {r.workload for r in runs}
    assert "bootstrap" not in names and {"array-sum", "svd", "noop"} <= names
    assert {r.env.path for r in runs} == {"batch"}
    assert {r.env.path for r in runs if r.workload == "noop"} == {"batch"}


def test_bad_options_are_refused_before_anything_runs(tmp_path):
    """In this process (click's runner): the refusals need no interpreter of their own each;
    ``python -m hpcgpu bench`` itself runs in the tests above."""
    from click.testing import CliRunner

    from hpcgpu.cli import main

    for argv, message in [
        (["--gpus", "1,x"], "--gpus '1,x'"),
        (["--scheduler", "slurm", "--compare", "plain"], "--compare runs the references"),
        (["--compare", "cuda"], "unknown ['cuda']"),
        (["arraysum"], "workload 'arraysum' is unknown"),
    ]:
        done = CliRunner().invoke(main, ["bench", *argv, "--out", str(tmp_path / "x")])
        assert done.exit_code == 2 and message in done.stderr, (argv, done.stderr, done.exception)
        assert not (tmp_path / "x").exists()  # refused before anything ran


@pytest.mark.slurm
def test_sweep_through_slurm_cluster_class(slurm, tmp_path):
    out = tmp_path / "slurm"
    done = subprocess.run(
        [*HPCGPU, "bench", "array-sum,bootstrap", "--scheduler", "slurm", "--gpus", "1,2",
         "--gpus-per-node", "2", "--walltime", "00:10:00", "--size", "tiny", "--repeats", "1",
         "--warmup", "0", "--out", str(out)], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = read_jsonl(out / "results.jsonl")
    assert len(runs) == 4 and all(r.ok and r.env.path == "slurm" for r in runs)
    assert (out / "plots" / "array-sum-strong.png").exists()


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gpu_benchmark_scripts_run_at_smoke_size_on_the_cpu(tmp_path):
    """The GPU benchmark scripts still run: tiny sizes, NumPy."""
    env = {**os.environ, "OUT": str(tmp_path)}
    for argv in (["benchmarks/gpu_perf.py", "--smoke", "--quick", "--only", "array-sum", "--gpus", "1"],
                 ["benchmarks/gpu/overlap_probe.py", "--smoke", "--saturations", "1.1"]):
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    perf = {r["case"]: r for r in json.load(open(tmp_path / "gpu_perf.json"))}
    fused = perf["hpcgpu LocalGPUCluster, 1 thread(s)/worker, fused (fuse-width auto) graph"]
    assert fused["seconds"] > 0 and fused["tasks"] < 100  # 20 x 20 blocks fused into a few tasks
    assert any(case.startswith("bare CuPy loop") and r["seconds"] > 0 for case, r in perf.items())
    probe = json.load(open(tmp_path / "overlap_probe.json"))
    on_cluster = [r for r in probe if r["view"] == "cluster"]
    # first and last task come from one worker's clock; wall_s from this process's: comparing
    # them across clocks failed on a busy CI machine (the workers' clock-offset estimate moves)
    assert on_cluster and all(r["tasks"] > 0 and r["first_task_s"] <= r["last_task_end_s"]
                              and r["wall_s"] > 0 for r in on_cluster), on_cluster


def test_persist_probe_runs_at_smoke_size_on_the_cpu(tmp_path):
    """``benchmarks/gpu/persist_probe.py --cpu``: each flavor's persist step, on the CPU."""
    argv = [sys.executable, "benchmarks/gpu/persist_probe.py", "--cpu", "--repeats", "2", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    probes = json.load(open(tmp_path / "persist_probe.json"))
    assert [p["flavor"] for p in probes] == ["dask-cuda", "hpcgpu", "hpcgpu-tcp"]
    for p in probes:
        assert len(p["rows"]) == 2 and all(r["step"] > 0 and r["value"] > 0 for r in p["rows"]), p
