"""hpcgpu.array's collective plane beside its task path on 1..N GPUs of one host.

    python benchmarks/gpu/scaleout.py --gpus 1,2,4 --reps 3 --out rows.jsonl

One JSON row per (case, GPUs, path): best and median seconds of ``--reps`` runs, the
bytes that cross GPUs (the plan's own count for the placement the run had is not known
here: ``bytes_crossing`` is the share ``(N-1)/N`` of the moved data, what a random
placement moves), TF/s for products, and the check of the result. The cases are those of
the side-by-side table (``../shared/bench/sidebyside.py``, which times dask-cuda on the
same GPUs), written with hpcgpu.array's plane functions, plus weak-scaling cases whose
size per GPU is fixed: a matmul (``--weak-rows`` rows of ``a`` per GPU), a tall-and-skinny
SVD (10 GB per GPU: 1.25 M x 1000 float64) and a 1-D sort (1 GiB of float64 per GPU).
``--set weak`` runs only those two, after a row each for one GPU's own limit: CuPy's
``linalg.qr`` of the whole tall matrix and ``cupy.sort`` of the whole vector of the largest
``--gpus`` count, in this process, before any worker starts.
"""

from __future__ import annotations

import argparse
import json
import math
import time


def timed(fn, reps):
    ts, val = [], None
    for _ in range(reps):
        t = time.perf_counter()
        val = fn()
        ts.append(time.perf_counter() - t)
    return round(min(ts), 4), round(sorted(ts)[len(ts) // 2], 4), val


def cases(ha, plane, method, g, weak_rows):
    from distributed import wait

    out = []
    t = ha.random.random(size=(40000, 40000), chunks=(5000, 5000), seed=3)
    tsd = math.sqrt(40000 ** 2 * 2 / 12 * 2)
    cross = 40000 ** 2 * 8 * (g - 1) / g
    out.append(("transpose-sum-generated", lambda: float((t + plane.transpose(t, method=method)).sum().compute()),
                lambda v: (v - 40000 ** 2) / tsd, cross, None))
    tp = t.persist()
    wait(tp)
    out.append(("transpose-sum-persisted", lambda: float((tp + plane.transpose(tp, method=method)).sum().compute()),
                lambda v: (v - 40000 ** 2) / tsd, cross, None))
    r = ha.random.random(size=(20000, 20000), chunks=(2500, 2500), seed=5).persist()
    wait(r)
    out.append(("rechunk-rows-to-cols",
                lambda: float(plane.rechunk(r, (20000, 500), method=method).sum(axis=0).max().compute()),
                lambda v: v, 20000 ** 2 * 8 * (g - 1) / g, None))
    m = ha.random.random(size=(20000, 20000), chunks=(2500, 2500), seed=6).persist()
    wait(m)
    out.append(("matmul-20000sq", lambda: float(plane.matmul(m, m, method=method).sum().compute()),
                lambda v: (v - 20000 ** 3 / 4) / (20000 ** 3 / 4), 20000 ** 2 * 8 * (g - 1) * 2 / g,
                2 * 20000 ** 3))
    n = weak_rows * g
    a = ha.random.random(size=(n, 20000), chunks=(2500, 2500), seed=7).persist()
    b = ha.random.random(size=(20000, 20000), chunks=(2500, 2500), seed=8).persist()
    wait([a, b])
    out.append((f"matmul-weak-{weak_rows}-rows-per-gpu", lambda: float(plane.matmul(a, b, method=method).sum().compute()),
                lambda v: (v - n * 20000 * 20000 / 4) / (n * 20000 * 20000 / 4),
                20000 ** 2 * 8 * (g - 1) + n * 20000 * 8 * (g - 1) / g, 2 * n * 20000 * 20000))
    out += weak_cases(ha, plane, method, g)
    return out


def weak_cases(ha, plane, method, g):
    """SVD at 10 GB and sort at 1 GiB per GPU; checks: sum(s**2) against ||A||_F**2, and
    the largest step down in the sorted output (0 when sorted)."""
    from distributed import wait

    from hpcgpu.array import linalg

    tall = ha.random.random(size=(1_250_000 * g, 1000), chunks=(125_000, 1000), seed=9).persist()
    v = ha.random.random(size=(2 ** 27 * g,), chunks=2 ** 24, seed=10).persist()
    wait([tall, v])
    frob = float((tall ** 2).sum().compute())

    def svd():
        u, s, _ = linalg.svd(tall, method=method)
        return float((s ** 2).sum().compute()) if u is not None else None

    def sort():
        y = plane.sort(v, method=method)
        return float((y[:-1] - y[1:]).max().compute())

    return [("svd-weak-10GB-per-gpu", svd, lambda x: (x - frob) / frob, 0, None),
            ("sort-weak-1GiB-per-gpu", sort, lambda x: max(x, 0.0), 2 ** 30 * (g - 1), None)]


def limits(g: int, reps: int, emit) -> None:
    """One GPU's CuPy on the whole weak-scaling input of ``g`` GPUs: the floor a plane run
    on ``g`` GPUs is compared with (it cannot beat ``1/g`` of it)."""
    import cupy

    def sync(fn):
        def timed_fn():
            out = fn()
            cupy.cuda.runtime.deviceSynchronize()
            return out
        return timed_fn

    tall = cupy.random.random((1_250_000 * g, 1000))
    best, med, _ = timed(sync(lambda: cupy.linalg.qr(tall, mode="r")), reps)
    emit(case="svd-weak-10GB-per-gpu", gpus=g, system="cupy-one-gpu", path="qr-r", best=best, median=med)
    del tall
    v = cupy.random.random(2 ** 27 * g)
    best, med, _ = timed(sync(lambda: cupy.sort(v)), reps)
    emit(case="sort-weak-1GiB-per-gpu", gpus=g, system="cupy-one-gpu", path="sort", best=best, median=med)
    del v
    cupy.get_default_memory_pool().free_all_blocks()


def run(g: int, reps: int, paths: list, weak_rows: int, emit, only_weak: bool = False, only: str = "") -> None:
    from distributed import Client

    import hpcgpu.array as ha
    from hpcgpu import LocalGPUCluster
    from hpcgpu.array import plane

    t0 = time.perf_counter()
    with LocalGPUCluster(n_workers=g, dashboard_address=None, silence_logs=40) as cluster, Client(cluster) as client:
        client.wait_for_workers(g, timeout=120)
        emit(case="cluster", gpus=g, startup_s=round(time.perf_counter() - t0, 2))
        for method in paths:
            todo = weak_cases(ha, plane, method, g) if only_weak else cases(ha, plane, method, g, weak_rows)
            for name, fn, check, crossing, flops in (c for c in todo if only in c[0]):
                try:
                    best, med, val = timed(fn, reps)
                    row = dict(case=name, gpus=g, system="hpcgpu", path=method, transport="nccl" if method ==
                               "collective" and g > 1 else "tcp", best=best, median=med,
                               bytes_crossing=int(crossing), check=round(check(val), 4))
                    if flops:
                        row["tflops"] = round(flops / best / 1e12, 2)
                    if method == "collective":  # each worker's last operation: ranks and own time
                        last = client.run(lambda dask_worker: getattr(
                            getattr(dask_worker, "_hpcgpu_plane", None), "history", [None])[-1])
                        row["workers"] = len(last)
                        row["rank_s"] = sorted(round(h[-1], 4) for h in last.values() if h)
                        row["ranks"] = sorted({h[3] for h in last.values() if h})
                    emit(**row)
                except Exception as e:  # noqa: BLE001 - a failed case is a row, the others run
                    emit(case=name, gpus=g, path=method, error=f"{type(e).__name__}: {e}"[:400])
            client.cancel(list(client.futures))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="1,2,4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--paths", default="collective,tasks")
    ap.add_argument("--weak-rows", type=int, default=20000)
    ap.add_argument("--set", choices=("all", "weak"), default="all")
    ap.add_argument("--only", default="", help="run only the cases whose name holds this text")
    ap.add_argument("--out", default="scaleout.jsonl")
    a = ap.parse_args()

    def emit(**row):
        print(json.dumps(row), flush=True)
        with open(a.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")

    counts = [int(g) for g in a.gpus.split(",")]
    if a.set == "weak":
        limits(max(counts), a.reps, emit)
    for g in counts:
        run(g, a.reps, a.paths.split(","), a.weak_rows, emit, only_weak=a.set == "weak", only=a.only)


if __name__ == "__main__":
    main()
