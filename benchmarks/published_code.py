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

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from published_checks import (check_allocator, check_blog, check_cluster, check_dataframe,  # noqa: E402
                              check_fits, check_persist, check_spill)
STEPS_FILE = HERE / "published_steps.py"
FLAVORS = ("dask-cuda", "hpcgpu")
#: optional further sides (``--flavors dask-cuda,hpcgpu,hpcgpu-tcp,hpcgpu-tls``): hpcgpu with
#: TLS off, as dask-cuda runs by default, and with TLS between its workers too (the workers of
#: ``LocalGPUCluster`` talk over private Unix sockets by default), to tell the transport's share
#: of a difference from the rest
VARIANTS = {"hpcgpu-tcp": ("TLS off", "security=False"),
            "hpcgpu-tls": ("TLS between workers", "protocol='tls'")}


def ratio_key(flavor: str) -> str:
    """Where a step's row keeps ``flavor``'s median over dask-cuda's: ``ratio``, ``ratio_tcp``, ..."""
    return "ratio" if flavor == "hpcgpu" else f"ratio_{flavor.removeprefix('hpcgpu-')}"


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
    # a one-GPU call of a few minutes: blog 320 GB (scaled), spill array 6.4 GB per GPU over a 4 GB limit
    "quick": dict(_TS, device_memory_limit="4GB", rmm_pool_size="6GB", persist_n=16000, persist_chunks=2000,
                  spill_shape=(20000, 40000), spill_chunks=(2500, 40000), models=200, rows=10000, features=8,
                  blog_n=200000, blog_chunks=(10000, 10000)),
    # the GPU tests (short): blog 12.8 GB, spill array 1.6 GB per GPU over a 1 GB limit
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
    table = dict(IMPORTS) if flavor.startswith("hpcgpu") else {}
    if flavor in VARIANTS:
        table["from dask_cuda import LocalCUDACluster"] = (
            "import functools; from hpcgpu import LocalGPUCluster; "
            f"LocalCUDACluster = functools.partial(LocalGPUCluster, {VARIANTS[flavor][1]})")
    table.update(CPU_IMPORTS["hpcgpu" if flavor in VARIANTS else flavor] if cpu else {})
    module = types.ModuleType(f"published_steps[{flavor}{'/cpu' if cpu else ''}]")
    module.__file__ = str(STEPS_FILE)  # not in sys.modules: cloudpickle ships its functions by value
    exec(compile(switch(STEPS_FILE.read_text(), table), str(STEPS_FILE), "exec"), module.__dict__)
    return module


def sizes_for(name: str, gpus: str | None = None) -> dict:
    """``SIZES[name]`` for the GPUs ``gpus`` (default: all visible); the spill array grows
    with their number, so that it passes every worker's ``device_memory_limit``.

    >>> sizes_for("test", "0,1")["spill_shape"], sizes_for("test", "0")["spill_shape"]
    ((40000, 10000), (20000, 10000))
    """
    if gpus is None and name != "cpu":
        from hpcgpu.cluster.local.cluster import visible_gpus

        gpus = ",".join(visible_gpus())
    s = dict(SIZES[name], gpus=gpus or "")
    n = max(1, len([g for g in s["gpus"].split(",") if g.strip()]))
    s["spill_shape"] = (s["spill_shape"][0] * n, *s["spill_shape"][1:])
    return s


# -- running and timing ----------------------------------------------------------------------

def run_once(steps, s: dict, gpu: bool, gather_limit: float) -> dict:
    """Every step once on a fresh cluster: ``{step: {"seconds", "check" | "error"}}``."""
    out: dict = {}

    def step(name, func, check):
        start = time.perf_counter()
        try:
            value = func()
        except Exception as error:  # recorded: the other steps and flavor still run
            if isinstance(error, ModuleNotFoundError) and error.name in ("cudf", "dask_cudf"):
                out[name] = dict(seconds=None, skipped=f"cuDF is not installed ({error.name})")
            else:
                out[name] = dict(seconds=None, error=f"{type(error).__name__}: {error}"[:600])
            return None
        seconds = time.perf_counter() - start
        try:
            out[name] = dict(seconds=seconds, check=check(value))
        except Exception as error:  # AssertionError: a wrong result; others: a result of another shape
            out[name] = dict(seconds=seconds, error=f"check failed: {type(error).__name__}: {error}"[:600])
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
        base = row.get(FLAVORS[0], {}).get("median")
        for flavor in ("hpcgpu", *VARIANTS):
            mine = row.get(flavor, {}).get("median")
            row[ratio_key(flavor)] = mine / base if base and mine else None
        table[name] = row
    return table


def markdown(result: dict) -> str:
    sides = {"hpcgpu": "hpcgpu", **{v: f"hpcgpu {VARIANTS[v][0]}" for v in VARIANTS if v in result["flavors"]}}
    head = "".join(f" {label} median s | {label} / dask-cuda |" for label in sides.values())
    lines = [f"# published code: {result['mode']}, sizes {result['sizes_name']}, {result['device']}", "",
             f"| step | dask-cuda median s |{head} hpcgpu check |",
             "| --- | --- |" + " --- | --- |" * len(sides) + " --- |"]

    def cell(row: dict, flavor: str) -> str:
        median = row.get(flavor, {}).get("median")
        return "n/a" if median is None else f"{median:.3f}"

    for name, row in result["steps"].items():
        ratios = {f: row.get(ratio_key(f)) for f in sides}
        more = "".join(f" {cell(row, f)} | {'n/a' if r is None else f'{r:.2f}'} |" for f, r in ratios.items())
        note = "; ".join(row.get("hpcgpu", {}).get("notes", []))[:160]
        lines.append(f"| {name} | {cell(row, FLAVORS[0])} |{more} {note} |")
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
    steps, runs, out = {}, [], Path(args.out)
    for flavor in flavors:
        try:
            steps[flavor] = load_steps(flavor, cpu=args.cpu)
        except Exception as error:  # e.g. dask-cuda not installed: that side is recorded as failed
            print(f"{flavor}: {type(error).__name__}: {error}", flush=True)
    meta = dict(mode="cpu" if args.cpu else "gpu", sizes_name=name, sizes=s, device=device_name(args.cpu),
                repeats=args.repeats, warmup=args.warmup, imports=IMPORTS, flavors=flavors,
                array_module={f: m.da.__name__ for f, m in steps.items()})
    for r in range(args.warmup + args.repeats):
        for flavor in (flavors if r % 2 == 0 else flavors[::-1]):
            print(f"repeat {r} {flavor} ...", flush=True)
            got = (run_once(steps[flavor], s, gpu, args.gather_limit) if flavor in steps
                   else {n: dict(seconds=None, error="the steps did not import") for n in STEPS})
            runs.append(dict(repeat=r, flavor=flavor, warmup=r < args.warmup, steps=got))
            for step_name, value in got.items():
                print(f"  {step_name:<10} {value}", flush=True)
            result = write(out, meta, runs, flavors)  # after every run: a killed run leaves its record
    print(markdown(result))
    return 1 if result["failed"] else 0


def write(out: Path, meta: dict, runs: list, flavors) -> dict:
    table = summarize(runs, flavors)
    result = dict(meta, steps=table, runs=runs,
                  slower=[n for n, row in table.items() if row["ratio"] is not None and row["ratio"] > 1],
                  failed=[f"{n}/{f}" for n, row in table.items() for f in flavors if row[f]["failed"]])
    out.mkdir(parents=True, exist_ok=True)
    (out / "published_code.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "published_code.md").write_text(markdown(result))
    return result

if __name__ == "__main__":
    sys.exit(main())
