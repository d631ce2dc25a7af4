"""GPU performance of hpcgpu beside its references, in one run.

For 1 and 4 GPUs (as many as there are): array-sum (2 TB: 500000 x 500000 float64 in
10000 x 10000 chunks) on hpcgpu's GPU workers through the real distributed scheduler
(fused graph; and unfused), the no-op graph of the same shape, the same code on dask-cuda's
LocalCUDACluster, dask's own CuPy random on LocalCUDACluster, and a bare CuPy loop over
the same chunks; groupby over one year at 1 s (cuDF, when importable); svd of
300000 x 1000 in 1000 x 1000 chunks; the cost of one chunk's generator set-up.

Writes ``$OUT/gpu_perf.json`` (every measurement) and ``$OUT/gpu_perf.md`` (tables).

    python benchmarks/gpu_perf.py                 # on the GPU machine
    python benchmarks/gpu_perf.py --smoke         # tiny sizes, any machine (CPU: numpy)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/fused_limit.py

import dask  # noqa: E402
import dask.array as da  # noqa: E402
from distributed import Client  # noqa: E402

import hpcgpu.array as ha  # noqa: E402
from hpcgpu import workloads as W  # noqa: E402
from hpcgpu.system.backends import cuda_device_count, module_usable  # noqa: E402
from hpcgpu.cluster.local import LocalGPUCluster  # noqa: E402

ROWS: list[dict] = []
LIMIT: dict = {}  # seconds of the one-kernel array-sum, by (n, chunk): the ratios' reference
OUT = os.environ.get("OUT", ".")


def record(group: str, case: str, gpus: int, seconds: float | None, **extra) -> None:
    row = dict(group=group, case=case, gpus=gpus, seconds=seconds, **extra)
    ROWS.append(row)
    shown = "n/a" if seconds is None else f"{seconds:8.3f} s"
    print(f"[{group}] {case:<58} gpus={gpus} {shown} {extra.get('note', '')}", flush=True)
    with open(os.path.join(OUT, "gpu_perf.json"), "w") as handle:  # partial results survive a kill
        json.dump(ROWS, handle, indent=1)


def timed(func, repeat: int = 2):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - start)
    return best, result


def array_sum_graph(n, chunk, backend, noop=False):
    if noop:  # same 50 x 50 block grid and reduction tree, 2 x 2 NumPy blocks
        n, chunk, backend = 2 * (n // chunk), 2, "cpu"
    x = ha.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=0, backend=backend)
    return (x + 1)[::2, ::2].sum()


def ntasks(collection) -> int:
    return len(dict(dask.optimize(collection)[0].__dask_graph__()))


@contextmanager
def cluster(kind: str, gpus: int, threads: int = 1, rmm_pool_size: str = "auto"):
    devices = [str(i) for i in range(gpus)]
    if kind == "hpcgpu":
        c = LocalGPUCluster(n_workers=gpus if cuda_device_count() else 1, gpus=devices if cuda_device_count() else [],
                            threads_per_worker=threads, dashboard_address=None, silence_logs=40,
                            rmm_pool_size=rmm_pool_size)
    else:
        from dask_cuda import LocalCUDACluster

        c = LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, threads_per_worker=threads,
                             dashboard_address=None, silence_logs=40)
    with c, Client(c) as client:
        client.wait_for_workers(len(c.worker_spec), timeout=300)
        yield client


def array_sum_runs(client, label: str, gpus: int, n: int, chunk: int, backend: str, fused_too: bool,
                   widths: tuple = ("auto",)):
    """The workload and its no-op twin, fused at each of ``widths`` (leaves per fused task;
    ``auto``: hpcgpu's default, from the cluster's threads) and, if asked, unfused."""
    for width in (*widths, 0) if fused_too else widths:
        with dask.config.set({"hpcgpu.array.fuse-width": width}):
            tag = f"fused (fuse-width {width})" if width else "unfused"
            graph = array_sum_graph(n, chunk, backend)
            client.compute(array_sum_graph(n // 10, chunk, backend)).result()  # warm: kernels, pool
            seconds, value = timed(lambda: client.compute(array_sum_graph(n, chunk, backend)).result(),
                                   2 if width else 1)
            record("array-sum", f"{label}, {tag} graph", gpus, seconds, tasks=ntasks(graph), nbytes=n * n * 8,
                   gbps=n * n * 8 / seconds / 1e9, value=float(value), **_vs_limit(n, chunk, seconds))
            noop = array_sum_graph(n, chunk, backend, noop=True)
            seconds, _ = timed(lambda: client.compute(array_sum_graph(n, chunk, backend, noop=True)).result())
            record("array-sum", f"no-op graph of the same shape on {label}, {tag}", gpus, seconds, tasks=ntasks(noop),
                   **_vs_limit(n, chunk, seconds))


def _vs_limit(n: int, chunk: int, seconds: float) -> dict:
    """The ratio to the one-kernel limit (:mod:`benchmarks.fused_limit`), when it was measured."""
    limit = LIMIT.get((n, chunk))
    return {"vs_limit": seconds / limit, "note": f"{seconds / limit:.1f}x the one-kernel limit"} if limit else {}


def fused_kernel_limit(n: int, chunk: int) -> None:
    """The physical reference: one CUDA kernel over all blocks (benchmarks/fused_limit.py)."""
    from fused_limit import array_sum_limit

    seconds, value = array_sum_limit(n, chunk)
    LIMIT[(n, chunk)] = seconds
    record("array-sum", "one fused CUDA kernel over all blocks (Philox + Box-Muller + 1 + strided sum)", 1,
           seconds, value=value, nbytes=n * n * 8, gbps=n * n * 8 / seconds / 1e9, note="the physical reference")


def bare_cupy_loop(n: int, chunk: int, backend: str, steps: str = "dask") -> float:
    """No Dask: the same per-chunk operations over the same chunks, on one device.

    With ``steps="dask"``, the step Dask runs per chunk: ``sum(getitem(block + 1, (::2,
    ::2)), axis=(0, 1), keepdims=True)`` where ``dask.array.chunk.getitem`` copies a view
    smaller than half its block. The copy matters on a GPU: CuPy reduces a strided view to
    one value in a single thread block (23 ms per chunk on an H200) and a contiguous array
    through CUB (0.2 ms). With ``steps="hpcgpu"``, the step hpcgpu's fused tasks run: the
    slice first, as a view, then ``+ 1`` and the sum.
    """
    from dask.array.chunk import getitem

    from hpcgpu.array.seeds import draw_block as _block

    xp = __import__("cupy" if backend == "cupy" else "numpy")
    if backend == "cupy":  # the allocator hpcgpu's workers use
        from hpcgpu.worker.gpusetup import setup_rmm

        setup_rmm("16GiB", xp.cuda.runtime.memGetInfo()[1])
    every_other = (slice(None, None, 2), slice(None, None, 2))

    def run():
        total = xp.zeros((1, 1), dtype="float64")
        for i in range(n // chunk):
            for j in range(n // chunk):
                block = _block(backend, 0, "normal", (10.0, 1.0), "float64", (chunk, chunk), (i, j))
                step = getitem(block + 1, every_other) if steps == "dask" else block[every_other] + 1
                total += xp.sum(step, axis=(0, 1), keepdims=True)
        return float(total[0, 0])

    seconds, _ = timed(run, 2)
    return seconds


def chunk_setup_costs(chunk: int) -> None:
    if not module_usable("cupy"):
        return
    import cupy

    shape = (chunk, chunk)
    from cupy.cuda import curand

    from hpcgpu.array.philox import philox_block

    makers = {
        "Philox4x32-10 kernel per chunk (hpcgpu)": lambda k: philox_block(k, "normal", (10.0, 1.0), "float64", shape),
        "cuRAND host Philox4x32-10 RandomState, fresh per chunk":
            lambda k: cupy.random.RandomState(k, method=curand.CURAND_RNG_PSEUDO_PHILOX4_32_10).normal(10, 1, shape),
        "CuPy Generator(Philox4x3210), fresh per chunk":
            lambda k: cupy.random.Generator(cupy.random.Philox4x3210(k)).standard_normal(shape),
        "XORWOW Generator, fresh per chunk (dask default_rng)":
            lambda k: cupy.random.Generator(cupy.random.XORWOW(k)).standard_normal(shape),
        "RandomState, fresh per chunk (blog code)":
            lambda k: cupy.random.RandomState(k).normal(10, 1, shape),
    }
    for name, make in makers.items():
        make(1)
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for k in range(20):
            (make(k) + 1)[::2, ::2].sum()
        cupy.cuda.Device().synchronize()
        record("chunk", f"{name} + slice + sum", 1, (time.perf_counter() - start) / 20)


def section_array_sum(args, gpu_counts, backend):
    n, chunk = args.n, args.chunk
    if not args.quick:
        chunk_setup_costs(chunk)
    if backend == "cupy":
        fused_kernel_limit(n, chunk)
    if args.no_fused_kernels:  # hpcgpu's graph with each block's steps run one by one (before the kernels)
        os.environ["DASK_HPCGPU__ARRAY__FUSED_KERNELS"] = "False"
        for gpus in gpu_counts:
            with cluster("hpcgpu", gpus, args.threads) as client:
                array_sum_runs(client, "hpcgpu LocalGPUCluster, fused-kernels off", gpus, n, chunk, backend, False)
        del os.environ["DASK_HPCGPU__ARRAY__FUSED_KERNELS"]
    if backend == "cupy" or args.smoke:
        record("array-sum", "bare CuPy loop over the same chunks (no Dask), Dask's chunk steps", 1,
               bare_cupy_loop(n, chunk, backend))
        record("array-sum", "bare CuPy loop over the same chunks (no Dask), hpcgpu's chunk steps", 1,
               bare_cupy_loop(n, chunk, backend, steps="hpcgpu"))
    for gpus in gpu_counts:
        for threads in ((1, 2) if gpus == 1 and not args.quick else (args.threads,)):
            with cluster("hpcgpu", gpus, threads) as client:
                array_sum_runs(client, f"hpcgpu LocalGPUCluster, {threads} thread(s)/worker", gpus, n, chunk,
                               backend, fused_too=gpus == 1 and threads == 1 and not args.quick,
                               widths=tuple(w if w == "auto" else int(w) for w in args.fuse_widths.split(",")))
        if args.saturation:
            # root-task queuing off: each worker holds all its tasks instead of ~1 ahead
            with dask.config.set({"distributed.scheduler.worker-saturation": args.saturation}), \
                    cluster("hpcgpu", gpus, args.threads) as client:
                array_sum_runs(client, f"hpcgpu LocalGPUCluster, worker-saturation {args.saturation}", gpus, n,
                               chunk, backend, fused_too=False)
        if args.rmm_pool_size:
            with cluster("hpcgpu", gpus, args.threads, rmm_pool_size=args.rmm_pool_size) as client:
                array_sum_runs(client, f"hpcgpu LocalGPUCluster, rmm_pool_size={args.rmm_pool_size}", gpus, n,
                               chunk, backend, fused_too=False)
        if args.dask_cuda:
            with cluster("dask-cuda", gpus) as client:
                array_sum_runs(client, "dask-cuda LocalCUDACluster", gpus, n, chunk, backend, fused_too=False)
                dask_cuda_references(client, gpus, n, chunk)
    if backend == "cupy" and args.references:
        blog_reference(n, chunk)


def _plain_dask():
    """Dask's own graph: hpcgpu's fusion pass off, CuPy chunks from dask.array.random."""
    return dask.config.set({"array.backend": "cupy", "hpcgpu.array.fuse-width": 0})


def dask_cuda_references(client, gpus: int, n: int, chunk: int) -> None:
    """The issue's dask-cuda references: dask's RandomState and Generator on CuPy."""
    import cupy

    with _plain_dask():
        rs = da.random.RandomState(RandomState=cupy.random.RandomState)
        expr = lambda: (rs.normal(10, 1, size=(n, n), chunks=(chunk, chunk)) + 1)[::2, ::2].sum()  # noqa: E731
        seconds, _ = timed(lambda: client.compute(expr()).result(), 1)
        record("array-sum", "dask-cuda LocalCUDACluster, dask RandomState on CuPy (XORWOW)", gpus, seconds,
               tasks=ntasks(expr()))
        if gpus == 1:
            # CuPy's Generator has no normal(): standard_normal + 10, the same work per chunk
            rng = da.random.default_rng(cupy.random.default_rng(0))
            expr = lambda: (rng.standard_normal(size=(n, n), chunks=(chunk, chunk)) + 11)[::2, ::2].sum()  # noqa: E731
            seconds, _ = timed(lambda: client.compute(expr()).result(), 1)
            record("array-sum", "dask-cuda LocalCUDACluster, dask default_rng on CuPy (Generator, XORWOW)", gpus,
                   seconds, tasks=ntasks(expr()))


def blog_reference(n: int, chunk: int) -> None:
    """The Dask blog's own code: dask + CuPy RandomState, single-threaded scheduler, one GPU."""
    import cupy

    with _plain_dask():
        rs = da.random.RandomState(RandomState=cupy.random.RandomState)
        x = rs.normal(10, 1, size=(n, n), chunks=(chunk, chunk))
        seconds, _ = timed(lambda: (x + 1)[::2, ::2].sum().compute(scheduler="single-threaded"), 1)
    record("array-sum", "the blog's code: dask + CuPy RandomState, single-threaded scheduler", 1, seconds)


def section_groupby(args, backend_df):
    """hpcgpu with its GPU-sized partitions; dask-cuda on the same graph and with dask's
    one-day partitions (what a dask-cuda user gets; one run: it takes seconds)."""
    runs = [("hpcgpu", None, 3)] + ([("dask-cuda", None, 3)] if args.dask_cuda else [])
    runs += [("dask-cuda", "1D", 1)] if args.dask_cuda and args.groupby_1d else []
    runs += [("hpcgpu", "1D", 1)] if not args.dask_cuda and backend_df == "cudf" and args.groupby_1d else []
    for kind, partition_freq, repeat in runs:
        with cluster(kind, 1) as client:
            timing = W.run(W.groupby(args.days, "1s", backend=backend_df, partition_freq=partition_freq), client,
                           repeat=repeat)
            parts = W._frame(args.days, "1s", 0, backend_df, partition_freq).npartitions
            record("groupby", f"{kind}: groupby(['id','name']).agg(x: sum, mean), {timing.workload.size}, "
                   f"partition_freq={partition_freq or 'hpcgpu default'}", 1, timing.seconds,
                   backend=timing.workload.backend, note=f"{parts} partitions")


def section_svd(args, backend):
    """hpcgpu.array.linalg.svd and, on the same workers, Dask's own; dask-cuda with Dask's."""
    runs = [("hpcgpu", "hpcgpu"), ("hpcgpu", "dask")] + ([("dask-cuda", "dask")] if args.dask_cuda else [])
    values = {}
    for kind, linalg in runs:
        with cluster(kind, 1) as client:
            timing = W.run(W.svd(args.svd_rows, 1000 if not args.smoke else 50,
                                 1000 if not args.smoke else 50, backend=backend, linalg=linalg), client, repeat=2)
            values[(kind, linalg)] = timing.result
            name = "hpcgpu.array.linalg.svd" if linalg == "hpcgpu" else "da.linalg.svd"
            record("svd", f"{kind}: {name} {timing.workload.size}", 1, timing.seconds,
                   note=_same_values(values, (kind, linalg)))


def _same_values(values: dict, case) -> str:
    """Whether ``case``'s singular values are those of the first run (they must be)."""
    import numpy as np

    first = next(iter(values.values()))
    return "same singular values" if np.allclose(values[case], first, rtol=1e-9, atol=1e-9) else "DIFFERENT VALUES"


def markdown() -> str:
    lines = ["| group | case | GPUs | seconds | tasks | note |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in ROWS:
        sec = "n/a" if r["seconds"] is None else f"{r['seconds']:.3f}"
        lines.append(f"| {r['group']} | {r['case']} | {r['gpus']} | {sec} | {r.get('tasks', '')} | {r.get('note', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script")
    parser.add_argument("--gpus", default="1,4", help="GPU counts to run (default 1,4)")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker for the multi-GPU runs")
    parser.add_argument("--saturation", type=float, default=None,
                        help="also run hpcgpu with this distributed.scheduler.worker-saturation")
    parser.add_argument("--rmm-pool-size", default=None,
                        help="also run hpcgpu with this rmm_pool_size ('none': CuPy's own pool)")
    parser.add_argument("--no-groupby-1d", dest="groupby_1d", action="store_false",
                        help="groupby only with hpcgpu's GPU-sized partitions (not dask's one-day ones)")
    parser.add_argument("--no-dask-cuda", dest="dask_cuda", action="store_false")
    parser.add_argument("--no-references", dest="references", action="store_false",
                        help="skip the blog's single-threaded code (about 30 s on one H200)")
    parser.add_argument("--only", default="array-sum,groupby,svd")
    parser.add_argument("--no-fused-kernels", action="store_true",
                        help="also run hpcgpu's array-sum with hpcgpu.array.fused-kernels=False")
    parser.add_argument("--fuse-widths", default="auto",
                        help="hpcgpu.array.fuse-width values to run hpcgpu's array-sum with, e.g. auto,16")
    parser.add_argument("--quick", action="store_true",
                        help="skip the per-chunk generator costs, unfused and 2-thread variants")
    args = parser.parse_args()
    args.n, args.chunk = (500_000, 10_000) if not args.smoke else (2_000, 100)
    args.days, args.svd_rows = (365, 300_000) if not args.smoke else (2, 5_000)
    os.makedirs(OUT, exist_ok=True)
    available = cuda_device_count()
    backend = "cupy" if available else "numpy"
    backend_df = "cudf" if module_usable("cudf") else "pandas"
    if available == 0 and not args.smoke:
        sys.exit("no GPU visible: run with --smoke to check the script on a CPU machine")
    args.dask_cuda = args.dask_cuda and available > 0
    gpu_counts = [g for g in map(int, args.gpus.split(",")) if g <= max(available, 1)]
    record("machine", f"{platform.node()} {_gpu_name()} x{available}; python {platform.python_version()}; "
           f"dask {dask.__version__}", available, None)
    started = time.perf_counter()
    only = args.only.split(",")
    sections = {"array-sum": lambda: section_array_sum(args, gpu_counts, backend),
                "groupby": lambda: section_groupby(args, backend_df), "svd": lambda: section_svd(args, backend)}
    for name in only:  # in the order given
        sections[name]()
    with open(os.path.join(OUT, "gpu_perf.md"), "w") as handle:
        handle.write(markdown())
    print(markdown())
    print(f"total {time.perf_counter() - started:.0f} s; wrote {OUT}/gpu_perf.json and {OUT}/gpu_perf.md")


def _gpu_name() -> str:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:
        return "no GPU"


if __name__ == "__main__":
    main()
