"""Users' published GPU Dask code, step by step: dask-cuda beside hpcgpu, one import changed.

Runs ``published_steps.py`` (the RAPIDS multi-GPU notebook's steps and the 2019 "GPU Dask
Arrays, first steps" blog code, sources named there) twice per repeat on the same GPUs:
as published (dask-cuda's ``LocalCUDACluster``, ``dask.array``) and with the two import
lines of ``IMPORTS`` switched to hpcgpu. Repeats interleave the two (their order
alternates); each step is timed, its result checked against NumPy/pandas, and the median
per step and the ratio hpcgpu/dask-cuda are written to ``$OUT/published_code.json`` and
``$OUT/published_code.md``. Exit status 1 where a step failed or its check did.

    python benchmarks/published_code.py --quick   # one GPU machine, a few minutes
    python benchmarks/published_code.py           # the published sizes (blog: 2 TB)
    python benchmarks/published_code.py --cpu     # NumPy/pandas, tiny, no dask-cuda
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import numpy

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
STEPS_FILE = HERE / "published_steps.py"
FLAVORS = ("dask-cuda", "hpcgpu")
STEPS = ("cluster", "allocator", "persist", "spill", "dataframe", "model_fits", "blog")
#: the one change a user makes, line for line
IMPORTS = {"from dask_cuda import LocalCUDACluster": "from hpcgpu import LocalGPUCluster as LocalCUDACluster",
           "import dask.array as da": "import hpcgpu.array as da"}
_CPU = {"import cupy": "from published_cpu import cupy", "import rmm.allocators.cupy": "from published_cpu import rmm",
        "import dask_cudf": "from published_cpu import dask_cudf"}
CPU_IMPORTS = {
    "dask-cuda": {**_CPU, "from dask_cuda import LocalCUDACluster":
                  "from published_cpu import LocalDaskCluster as LocalCUDACluster"},
    "hpcgpu": {**_CPU, "from dask_cuda import LocalCUDACluster":
               "from published_cpu import LocalHpcgpuCluster as LocalCUDACluster",
               "import dask.array as da": "from published_cpu import hpcgpu_array; da = hpcgpu_array()"}}
_TS = dict(timeseries={}, window=100)  # dask.datasets.timeseries() as published: 30 days at 1 s
SIZES = {
    # blog as published (2 TB); the notebook's arrays sized for one 80 GB GPU, the spill
    # array 1.2x device_memory_limit
    "full": dict(_TS, device_memory_limit="16GB", rmm_pool_size="20GB", persist_n=30000, persist_chunks=3000,
                 spill_shape=(60000, 40000), spill_chunks=(5000, 40000), models=1000, rows=10000, features=8,
                 blog_n=500000, blog_chunks=(10000, 10000)),
    # a one-GPU call of a few minutes: blog 320 GB (scaled), spill array 6.4 GB over a 4 GB limit
    "quick": dict(_TS, device_memory_limit="4GB", rmm_pool_size="6GB", persist_n=16000, persist_chunks=2000,
                  spill_shape=(20000, 40000), spill_chunks=(2500, 40000), models=200, rows=10000, features=8,
                  blog_n=200000, blog_chunks=(10000, 10000)),
    # the GPU tests (short): blog 12.8 GB, spill array 1.6 GB over a 1 GB limit
    "test": dict(_TS, device_memory_limit="1GB", rmm_pool_size="2GB", persist_n=8000, persist_chunks=1000,
                 spill_shape=(20000, 10000), spill_chunks=(2500, 10000), models=50, rows=2000, features=8,
                 blog_n=40000, blog_chunks=(10000, 10000)),
    # CPU smoke: tiny everything (timeseries: 2 days at 10 s)
    "cpu": dict(timeseries=dict(end="2000-01-03", freq="10s"), window=100, device_memory_limit="1GB",
                rmm_pool_size="1GB", persist_n=400, persist_chunks=100, spill_shape=(800, 400),
                spill_chunks=(100, 400), models=8, rows=200, features=4, blog_n=2000, blog_chunks=(500, 500)),
}


def switch(source: str, table: dict) -> str:
    """``source`` with each line of ``table`` (stripped, exactly once) replaced, indent kept."""
    lines, seen = source.splitlines(), dict.fromkeys(table, 0)
    for i, line in enumerate(lines):
        key = line.strip()
        if key in table:
            seen[key] += 1
            lines[i] = line[: len(line) - len(line.lstrip())] + table[key]
    wrong = {key: n for key, n in seen.items() if n != 1}
    assert not wrong, f"import lines not found exactly once in {STEPS_FILE.name}: {wrong}"
    return "\n".join(lines) + "\n"


def load_steps(flavor: str, cpu: bool = False) -> types.ModuleType:
    """The published steps as ``flavor`` runs them: as written, or with ``IMPORTS`` switched."""
    table = dict(IMPORTS) if flavor == "hpcgpu" else {}
    table.update(CPU_IMPORTS[flavor] if cpu else {})
    module = types.ModuleType(f"published_steps[{flavor}{'/cpu' if cpu else ''}]")
    module.__file__ = str(STEPS_FILE)  # not in sys.modules: cloudpickle ships its functions by value
    exec(compile(switch(STEPS_FILE.read_text(), table), str(STEPS_FILE), "exec"), module.__dict__)
    return module


def sizes_for(name: str, gpus: str | None = None) -> dict:
    if gpus is None and name != "cpu":
        from hpcgpu.local import visible_gpus

        gpus = ",".join(visible_gpus())
    return dict(SIZES[name], gpus=gpus or "")


# -- checks: each step's result against NumPy/pandas --------------------------------------

def _worker_state(cupy, dask_worker=None):
    name = getattr(cupy.cuda.get_allocator(), "__name__", repr(cupy.cuda.get_allocator()))
    data = getattr(dask_worker, "data", None)
    spilled = len(getattr(data, "host", None) or ()) + len(getattr(data, "disk", None) or ())
    return dict(allocator=name, spilled=spilled, store=type(data).__name__)


def check_cluster(client, s: dict, gpu: bool) -> str:
    workers = client.scheduler_info()["workers"]
    want = [g for g in s["gpus"].split(",") if g] if gpu else [None]
    assert len(workers) == len(want), f"{len(workers)} workers for CUDA_VISIBLE_DEVICES={s['gpus']!r}"
    if gpu:
        got = sorted(client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]).values())
        assert got == sorted(want), f"workers' first GPUs {got}, asked {want}"
    return f"{len(workers)} workers"


def check_allocator(client, cupy) -> str:
    names = {v["allocator"] for v in client.run(_worker_state, cupy).values()}
    assert names == {"rmm_cupy_allocator"}, f"workers' CuPy allocators: {names}"
    return "rmm_cupy_allocator on every worker"


def _uniform_sum_ok(total: float, size: int) -> None:
    sigma = (size / 12) ** 0.5
    assert abs(total - size / 2) < 10 * sigma, f"sum {total} of {size} uniforms: expected {size / 2} +- {10 * sigma}"


def check_persist(x, total, asnumpy, gather_limit: float) -> str:
    _uniform_sum_ok(float(total) / 2, x.size)
    if x.nbytes > gather_limit:
        return "statistics only (not gathered)"
    h = x.map_blocks(asnumpy, dtype=x.dtype).compute()
    numpy.testing.assert_allclose(float(total), numpy.sum(h + h.T), rtol=1e-9)
    return "equals NumPy's (x + x.T).sum() of the gathered array"


def check_spill(client, x, total, cupy, gpu: bool) -> str:
    _uniform_sum_ok(float(total), x.size)
    if not gpu:
        return "sum checked; no device limit on CPU"
    state = client.run(_worker_state, cupy)
    spilled = sum(v["spilled"] for v in state.values())
    assert spilled > 0, f"nothing spilled past device_memory_limit: {state}"
    return f"{spilled} chunks spilled to host"


def check_dataframe(df, means, rolled, window: int) -> str:
    pdf = df.compute(scheduler="sync")  # the same frame, by pandas in this process
    _pandas = lambda obj: obj.to_pandas() if hasattr(obj, "to_pandas") else obj  # noqa: E731 cuDF's or pandas'
    ref, got = pdf.groupby("name").x.mean().sort_index(), _pandas(means).sort_index()
    assert list(got.index) == list(ref.index), (list(got.index), list(ref.index))
    numpy.testing.assert_allclose(got.to_numpy(), ref.to_numpy(), rtol=1e-9)
    ref, got = pdf.x.rolling(window).mean(), _pandas(rolled)
    assert (got.index == ref.index).all() and len(got) == len(pdf)
    numpy.testing.assert_allclose(got.to_numpy(dtype=float, na_value=numpy.nan), ref.to_numpy(), rtol=1e-6,
                                  atol=1e-9, equal_nan=True)
    return f"groupby and rolling({window}) equal pandas' on {len(pdf)} rows"


def check_fits(fits, problem, s: dict) -> str:
    assert len(fits) == s["models"], len(fits)
    for i, coef in enumerate(fits):
        X, y = problem(numpy, i, s["rows"], s["features"])
        numpy.testing.assert_allclose(coef, numpy.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-7, atol=1e-9)
    return f"{len(fits)} fits equal NumPy's lstsq"


def check_blog(total, s: dict) -> str:
    m = ((s["blog_n"] + 1) // 2) ** 2  # elements of x[::2, ::2], each N(11, 1)
    assert abs(float(total) - 11 * m) < 10 * m**0.5, f"{float(total)} vs {11 * m} +- {10 * m ** 0.5}"
    return f"sum of {m} N(11,1) within 10 sigma"


# -- running and timing ----------------------------------------------------------------------

def run_once(steps, s: dict, gpu: bool, gather_limit: float) -> dict:
    """Every step once on a fresh cluster: ``{step: {"seconds", "check" | "error"}}``."""
    out: dict = {}

    def step(name, func, check):
        start = time.perf_counter()
        try:
            value = func()
        except ModuleNotFoundError as error:
            if error.name not in ("cudf", "dask_cudf"):
                raise
            out[name] = dict(seconds=None, skipped=f"cuDF is not installed ({error.name})")
            return None
        except Exception as error:  # recorded: the other steps and flavor still run
            out[name] = dict(seconds=None, error=f"{type(error).__name__}: {error}"[:600])
            return None
        seconds = time.perf_counter() - start
        try:
            out[name] = dict(seconds=seconds, check=check(value))
        except AssertionError as error:
            out[name] = dict(seconds=seconds, error=f"check failed: {error}"[:600])
        return value

    started = step("cluster", lambda: steps.start_cluster(s), lambda v: check_cluster(v[1], s, gpu))
    if started is None:
        out["cluster"] = out.get("cluster") or dict(seconds=None, error="no cluster")
        return dict(out, **{n: dict(seconds=None, error="not run: no cluster") for n in STEPS[1:]})
    cluster, client = started
    try:
        step("allocator", lambda: steps.set_allocator(client), lambda _: check_allocator(client, steps.cupy))
        step("persist", lambda: steps.persist_array(s), lambda v: check_persist(*v, steps.cupy.asnumpy, gather_limit))
        step("spill", lambda: steps.spill_array(s), lambda v: check_spill(client, *v, steps.cupy, gpu))
        step("dataframe", lambda: steps.dataframe(s), lambda v: check_dataframe(*v, s["window"]))
        step("model_fits", lambda: steps.model_fits(s), lambda v: check_fits(v, steps.problem, s))
        step("blog", lambda: steps.blog(s), lambda v: check_blog(v, s))
    finally:
        client.close()
        cluster.close()
    return out


def summarize(runs: list[dict], flavors) -> dict:
    """Median seconds per step and flavor over the timed repeats, and hpcgpu/dask-cuda."""
    table = {}
    for name in STEPS:
        row = {}
        for flavor in flavors:
            mine = [r["steps"][name] for r in runs if r["flavor"] == flavor and not r["warmup"]]
            seconds = [m["seconds"] for m in mine if m.get("seconds") is not None and "error" not in m]
            notes = sorted({m.get("error") or m.get("skipped") or m.get("check") for m in mine})
            row[flavor] = dict(seconds=seconds, median=statistics.median(seconds) if seconds else None,
                               failed=any("error" in m for m in mine), notes=notes)
        a, b = (row.get(f, {}).get("median") for f in FLAVORS)
        row["ratio"] = b / a if a and b else None
        table[name] = row
    return table


def markdown(result: dict) -> str:
    lines = [f"# published code: {result['mode']}, sizes {result['sizes_name']}, {result['device']}", "",
             "| step | dask-cuda median s | hpcgpu median s | hpcgpu / dask-cuda | hpcgpu check |",
             "| --- | --- | --- | --- | --- |"]
    for name, row in result["steps"].items():
        cell = [f"{row[f]['median']:.3f}" if row.get(f, {}).get("median") is not None else "n/a" for f in FLAVORS]
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}"
        note = "; ".join(row.get("hpcgpu", {}).get("notes", []))[:160]
        lines.append(f"| {name} | {cell[0]} | {cell[1]} | {ratio} | {note} |")
    lines += ["", f"slower than dask-cuda: {', '.join(result['slower']) or 'none'}",
              f"failed: {', '.join(result['failed']) or 'none'}", ""]
    return "\n".join(lines)


def device_name(cpu: bool) -> str:
    if cpu:
        return f"CPU ({platform.node()}, {os.cpu_count()} cores)"
    from hpcgpu.worker.gpuinfo import nvml_library

    nvml = nvml_library()
    name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)) if nvml else "unknown GPU"
    return name.decode() if isinstance(name, bytes) else str(name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes for a one-GPU call of a few minutes")
    parser.add_argument("--cpu", action="store_true", help="NumPy/pandas, tiny sizes, no dask-cuda")
    parser.add_argument("--sizes", choices=sorted(SIZES), help="a size set by name (overrides --quick)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per flavor")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repeats first (CUDA/JIT caches)")
    parser.add_argument("--gpus", help="CUDA_VISIBLE_DEVICES for both clusters (default: all visible)")
    parser.add_argument("--flavors", default=",".join(FLAVORS), help="which sides to run")
    parser.add_argument("--gather-limit", type=float, default=2e9, help="bytes up to which arrays are gathered")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON and markdown")
    args = parser.parse_args(argv)
    name = args.sizes or ("cpu" if args.cpu else "quick" if args.quick else "full")
    s, gpu, flavors = sizes_for(name, args.gpus), not args.cpu, args.flavors.split(",")
    # workers (spawned) import published_cpu/published_code by name when functions come by reference
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    steps = {f: load_steps(f, cpu=args.cpu) for f in flavors}
    runs = []
    for r in range(args.warmup + args.repeats):
        for flavor in (flavors if r % 2 == 0 else flavors[::-1]):
            print(f"repeat {r} {flavor} ...", flush=True)
            got = run_once(steps[flavor], s, gpu, args.gather_limit)
            runs.append(dict(repeat=r, flavor=flavor, warmup=r < args.warmup, steps=got))
            for step_name, value in got.items():
                print(f"  {step_name:<10} {value}", flush=True)
    table = summarize(runs, flavors)
    result = dict(mode="cpu" if args.cpu else "gpu", sizes_name=name, sizes=s, device=device_name(args.cpu),
                  repeats=args.repeats, warmup=args.warmup, imports=IMPORTS, flavors=flavors,
                  array_module={f: steps[f].da.__name__ for f in flavors}, steps=table, runs=runs,
                  slower=[n for n, row in table.items() if row["ratio"] is not None and row["ratio"] > 1],
                  failed=[f"{n}/{f}" for n, row in table.items() for f in flavors if row[f]["failed"]])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "published_code.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "published_code.md").write_text(markdown(result))
    print(markdown(result))
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
