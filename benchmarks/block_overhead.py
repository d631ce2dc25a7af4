"""Fixed cost per input block: #40's named set at 100 and 2,500 blocks, hpcgpu beside plain distributed.

Each block holds ``--chunk`` x ``--chunk`` elements (8 x 8 by default), so a block's own work
is nearly nothing and ``compute()``'s wall time is the graph machinery: building the
collection, optimising it, sending it, the scheduler's materialisation, dispatch and gather.
The overhead per input block is ``(best at 2,500 blocks - best at 100 blocks) / 2,400``
(#40's goal: at most 20 us).

Workloads (#40's named set, ``benchmarks/README.md``), each on ``b`` x ``b`` blocks:

- ``array-sum``: ``(normal(10, 1, shape, chunks) + 1)[::2, ::2].sum()``;
- ``transpose-sum``: ``(x + x.T).sum()`` of a generated ``x``;
- ``std``: ``x.std()`` of a generated ``x``;
- ``persisted-mean``: ``x.mean()`` of an ``x`` persisted on the workers before the timing.

Sides: hpcgpu.array on :class:`~hpcgpu.cluster.local.LocalGPUCluster` (its defaults: TLS,
``gpus=[]`` and NumPy blocks where there is no GPU) and dask.array on distributed's
``LocalCluster`` over ``tls://`` with hpcgpu's temporary certificate, Dask's own
optimiser; the same number of workers and threads. Per row, best of ``--repeats`` (after
one warm-up) of: ``build`` (making the collection), ``optimise`` (``dask.optimize``
in the client, the graph materialised), ``mat`` (the scheduler's ``update-graph``:
unpickling and materialisation, hpcgpu's passes included), ``compute`` (``compute()``'s
wall time, build excluded), ``cpu`` (CPU time of the compute in the client's process, which
holds the scheduler, and in the workers: the load of a shared machine moves it less than
wall time); ``tasks`` after optimisation. Prints a table; ``--json``
writes the rows and the per-block overhead::

    python benchmarks/block_overhead.py --repeats 5 --json benchmarks/results/cpu/block_overhead.json
    python benchmarks/block_overhead.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from contextlib import ExitStack

import dask
import dask.array as da
from dask.array.optimization import optimize as dask_array_optimize
from distributed import Client, LocalCluster

import hpcgpu.array as ha
from hpcgpu.cluster.local import LocalGPUCluster
from hpcgpu.network.tls import temporary_security

WORKLOADS = ("array-sum", "transpose-sum", "std", "persisted-mean")
PLAIN = {"array_optimize": dask_array_optimize}  # hpcgpu installs its optimiser process-wide


def generated(side: str, blocks: int, chunk: int, gpu: bool):
    """A generated ``blocks`` x ``blocks`` array of ``chunk``-sided blocks, per side."""
    shape, chunks = (blocks * chunk,) * 2, (chunk, chunk)
    if side == "hpcgpu":
        return ha.random.normal(10, 1, size=shape, chunks=chunks, seed=0, backend="gpu" if gpu else "cpu")
    if gpu:
        import cupy  # Dask's default_rng takes no CuPy Generator ('Generator' has no 'normal')
        return da.random.RandomState(0, RandomState=cupy.random.RandomState).normal(
            10, 1, size=shape, chunks=chunks)
    return da.random.default_rng(0).normal(10, 1, size=shape, chunks=chunks)


def expression(workload: str, x):
    """The workload's expression over the array ``x``."""
    return {"array-sum": lambda: (x + 1)[::2, ::2].sum(), "transpose-sum": lambda: (x + x.T).sum(),
            "std": lambda: x.std(), "persisted-mean": lambda: x.mean()}[workload]()


def scheduler_mat(client: Client, after: float) -> float:
    """Seconds of materialisation of the scheduler's last ``update-graph`` after ``after``."""
    metrics = [e["metrics"] for _, e in client.get_events("scheduler")
               if e.get("action") == "update-graph" and e.get("status") == "OK"
               and e["metrics"]["start_timestamp_seconds"] >= after]
    return metrics[-1]["materialization_duration_seconds"] if metrics else float("nan")


def cpu_seconds(client: Client) -> float:
    """CPU seconds so far of this process (the client, and the scheduler where it runs
    here) and of every worker process: a figure the machine's load moves less than wall time."""
    return time.process_time() + sum(client.run(time.process_time).values())


def sample(side: str, client: Client, workload: str, blocks: int, chunk: int, gpu: bool, base) -> dict:
    """One timed ``compute()`` of ``workload``: seconds per phase, CPU seconds of the
    compute (client, scheduler and workers), and the result."""
    with dask.config.set({} if side == "hpcgpu" else PLAIN), client.as_current():
        t0 = time.time()
        y = expression(workload, base if base is not None else generated(side, blocks, chunk, gpu))
        c1 = cpu_seconds(client)
        t1 = time.time()
        value = float(client.compute(y).result())
        t2 = time.time()
        cpu = cpu_seconds(client) - c1
        start = time.perf_counter()
        tasks = len(dict(dask.optimize(y)[0].__dask_graph__()))
        optimise = time.perf_counter() - start
    return dict(build=t1 - t0, optimise=optimise, mat=scheduler_mat(client, t1), compute=t2 - t1,
                cpu=cpu, tasks=tasks, value=value)


def best(runs: list[dict]) -> dict:
    """The fastest ``compute`` and the fastest of each phase, in milliseconds."""
    out = {p: round(min(r[p] for r in runs) * 1e3, 2) for p in ("build", "optimise", "mat", "compute", "cpu")}
    return dict(out, tasks=runs[0]["tasks"], value=runs[0]["value"], runs=len(runs))


def open_clients(stack: ExitStack, workers: int, gpu: bool) -> dict:
    """A LocalGPUCluster and a LocalCluster, both over TLS with ``workers`` one-thread workers."""
    options = dict(n_workers=workers, threads_per_worker=1, dashboard_address=None, silence_logs=40)
    ours = stack.enter_context(LocalGPUCluster(**options, **({} if gpu else {"gpus": []})))
    security = temporary_security()
    plain = stack.enter_context(LocalCluster(**options, protocol="tls://", security=security))
    out = {"hpcgpu": stack.enter_context(Client(ours)), "distributed": stack.enter_context(Client(plain, security=security))}
    for client in out.values():
        client.get_task_stream()  # the task stream plugin in place before the runs
    return out


def run(workloads, sizes, chunk: int, repeats: int, workers: int, gpu: bool, sides=("hpcgpu", "distributed")) -> list[dict]:
    """Best-of-``repeats`` rows for ``sides``, every workload and size, interleaved per repeat."""
    with ExitStack() as stack:
        clients = {k: v for k, v in open_clients(stack, workers, gpu).items() if k in sides}
        cases = [(s, w, b) for w in workloads for b in sizes for s in clients]
        bases = {}
        for side, workload, blocks in cases:
            if workload == "persisted-mean":
                with dask.config.set({} if side == "hpcgpu" else PLAIN), clients[side].as_current():
                    bases[side, workload, blocks] = clients[side].persist(generated(side, blocks, chunk, gpu))
        samples: dict = {case: [] for case in cases}
        for i in range(repeats + 1):
            for case in cases:
                side, workload, blocks = case
                s = sample(side, clients[side], workload, blocks, chunk, gpu, bases.get(case))
                if i:  # the first round warms both clusters up
                    samples[case].append(s)
                print(f"# {i} {side} {workload} {blocks * blocks}: {s['compute'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
        return [dict(side=s, workload=w, blocks=b * b, **best(samples[s, w, b])) for s, w, b in cases]


def per_block(rows: list[dict], low: int, high: int) -> list[dict]:
    """Microseconds of ``compute`` per input block between ``low`` and ``high`` blocks, per side and workload."""
    by = {(r["side"], r["workload"], r["blocks"]): r for r in rows}
    out = []
    for side, workload in dict.fromkeys((r["side"], r["workload"]) for r in rows):
        a, b = by.get((side, workload, low)), by.get((side, workload, high))
        if a and b:
            us, cpu = ((b[p] - a[p]) * 1e3 / (high - low) for p in ("compute", "cpu"))
            out.append(dict(side=side, workload=workload, us_per_block=round(us, 1), cpu_us_per_block=round(cpu, 1)))
    return out


def render(rows: list[dict], overhead: list[dict]) -> str:
    """The table: a row per side, workload and size (ms, best of the repeats), then us per block."""
    head = (f"{'side':12s} {'workload':15s} {'blocks':>6s} {'tasks':>6s} {'build':>8s} {'optimise':>9s} {'mat':>8s} "
            f"{'compute':>8s} {'cpu':>8s}")
    lines = [head, "-" * len(head)]
    lines += [f"{r['side']:12s} {r['workload']:15s} {r['blocks']:6d} {r['tasks']:6d} {r['build']:8.2f} "
              f"{r['optimise']:9.2f} {r['mat']:8.2f} {r['compute']:8.2f} {r['cpu']:8.2f}" for r in rows]
    lines += ["", "overhead per input block (us, wall / cpu): " + ", ".join(
        f"{o['side']} {o['workload']} {o['us_per_block']} / {o['cpu_us_per_block']}" for o in overhead)]
    return "\n".join(lines)


def has_gpu() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, or no driver: NumPy blocks
        return False


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=8, help="block side in elements")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--sides", default="hpcgpu,distributed", help="hpcgpu alone: a before/after check")
    parser.add_argument("--json", help="write the rows, the overhead per block and the machine here")
    parser.add_argument("--smoke", action="store_true", help="4 and 16 blocks, 1 repeat")
    args = parser.parse_args(argv)
    sides = (2, 4) if args.smoke else (10, 50)  # 100 and 2,500 blocks
    repeats = 1 if args.smoke else args.repeats
    gpu, load = has_gpu(), os.getloadavg()[0]
    rows = run(args.workloads.split(","), sides, args.chunk, repeats, args.workers, gpu, args.sides.split(","))
    overhead = per_block(rows, sides[0] ** 2, sides[1] ** 2)
    print(render(rows, overhead), flush=True)
    if args.json:
        record = dict(command=" ".join(["python", sys.argv[0], *(argv or sys.argv[1:])]),
                      machine=platform.node(), cpus=os.cpu_count(), gpu=gpu,
                      load_average=[load, os.getloadavg()[0]], python=platform.python_version(),
                      dask=dask.__version__, unit="ms, best of repeats; us per block",
                      rows=rows, overhead_per_block=overhead)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
