"""The fixed cost of one ``compute()``: hpcgpu beside plain distributed, phase by phase (CPU).

From building the graph to the first task running on a worker, for graphs of a few dozen
to a few hundred tasks after optimisation, median of ``--repeats`` runs per row:

- ``build``: making the collection (``(normal(...) + 1)[::2, ::2].sum()``);
- ``submit``: from calling ``client.compute()`` to the scheduler starting ``update-graph``:
  the graph wrapped as an expression, the expression optimised (``opt``), pickled (``ser``)
  and sent; ``opt`` and ``ser`` are those two steps timed again on their own beside the run
  (the scheduler runs in the client's process, so the two overlap the send);
- ``mat``: the scheduler's materialisation (unpickling and the low-level optimisation,
  hpcgpu's fusion included: both happen there in distributed 2026);
- ``state``: ordering and task states, up to the first tasks sent to workers;
- ``dispatch``: from there to the first task starting on a worker (its ``startstops``);
- ``total``: ``build`` start to first task start; ``compute``: ``compute()`` to first task.

Rows: hpcgpu.array on a :class:`~hpcgpu.cluster.local.LocalGPUCluster` (CPU mode) and dask.array
on distributed's ``LocalCluster``, one worker process with one thread each, the same
transport (TLS with a temporary certificate, and TCP); graphs with the same number of
tasks after optimisation (hpcgpu fuses the array-sum's 2,500 generated blocks into about
60 tasks; the same expression on 5 x 5 and 11 x 11 blocks on both gives 62 and about 290);
and distributed's one-task round trip (``submit(...).result()``) as the floor. All clusters
are open at once and the rows are measured interleaved, so load from other processes falls
on all of them alike. Prints a table; ``--json`` writes the medians::

    python benchmarks/fixed_cost.py --repeats 30 --json benchmarks/results/cpu/fixed_cost.json
    python benchmarks/fixed_cost.py --smoke
    python benchmarks/fixed_cost.py --pieces   # CPU ms of the fused array-sum's per-key steps
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import dask
import dask.array as da
from dask.array.optimization import optimize as dask_array_optimize
from dask.base import collections_to_expr
from distributed import Client, LocalCluster
from distributed.protocol import serialize, to_serialize
from distributed.security import Security

import hpcgpu.array as ha
from hpcgpu.cluster.local import LocalGPUCluster

PHASES = ("build", "submit", "opt", "ser", "mat", "state", "dispatch", "compute", "total")


def hpcgpu_sum(blocks: int):
    """The array-sum's shape on ``blocks`` x ``blocks`` generated 2 x 2 NumPy blocks."""
    x = ha.random.normal(10, 1, size=(2 * blocks,) * 2, chunks=(2, 2), seed=0, backend="cpu")
    return (x + 1)[::2, ::2].sum()


def dask_sum(blocks: int):
    """The same with dask.array's own generator."""
    x = da.random.default_rng(0).normal(10, 1, size=(2 * blocks,) * 2, chunks=(2, 2))
    return (x + 1)[::2, ::2].sum()


@dataclass(frozen=True)
class Row:
    """One row: a name, the client to run on, the graph maker and its dask config."""

    name: str
    client: Client
    make: Callable
    config: dict


def client_side(collection) -> tuple[float, float]:
    """Seconds to wrap and optimise ``collection`` as ``Client.compute`` does, and to pickle it."""
    from dask._expr import FinalizeCompute

    start = time.perf_counter()
    expr = FinalizeCompute(collections_to_expr([collection], True)).optimize()
    optimised = time.perf_counter()
    serialize(to_serialize(expr), on_error="raise")
    return optimised - start, time.perf_counter() - optimised


def scheduler_update(client: Client, after: float) -> dict:
    """The metrics of the scheduler's last ``update-graph`` that started after ``after``."""
    events = [e["metrics"] for _, e in client.get_events("scheduler")
              if e.get("action") == "update-graph" and e.get("status") == "OK"
              and e["metrics"]["start_timestamp_seconds"] >= after]
    return events[-1]


def first_start(client: Client, after: float) -> float:
    """When the first task that ran after ``after`` started computing on its worker."""
    starts = [s["start"] for t in client.get_task_stream(start=after) for s in t["startstops"]
              if s["action"] == "compute" and s["start"] >= after]
    return min(starts)


def measure(row: Row) -> dict:
    """One ``compute()`` of ``row``: seconds per phase (:data:`PHASES`)."""
    with dask.config.set(row.config):
        t0 = time.time()
        collection = row.make()
        t1 = time.time()
        row.client.compute(collection).result()
        opt, ser = client_side(collection)
    m = scheduler_update(row.client, t1)
    start = m["start_timestamp_seconds"]
    materialised = start + m["materialization_duration_seconds"]
    done = start + m["duration_seconds"]
    first = first_start(row.client, t1)
    return dict(build=t1 - t0, submit=start - t1, opt=opt, ser=ser, mat=materialised - start,
                state=done - materialised, dispatch=first - done, compute=first - t1, total=first - t0)


def round_trip(client: Client) -> dict:
    """distributed's one-task round trip: ``submit`` to result, in seconds."""
    start = time.time()
    client.submit(_noop, start, pure=False).result()
    return dict(total=time.time() - start)


def _noop(x):
    return x


def clusters(protocol: str, stack) -> dict:
    """An hpcgpu and a plain cluster over ``protocol`` ("tls" or "tcp"), their clients open."""
    security = Security.temporary() if protocol == "tls" else None
    options = dict(n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=40,
                   protocol=f"{protocol}://", security=security)
    out = {}
    for kind, cls in (("hpcgpu", LocalGPUCluster), ("distributed", LocalCluster)):
        extra = {"gpus": []} if cls is LocalGPUCluster else {}
        cluster = stack.enter_context(cls(**options, **extra))
        out[kind] = client = stack.enter_context(Client(cluster, security=security))
        client.get_task_stream()  # installs the scheduler's task stream plugin before the runs
    return out


def rows(protocol: str, clients: dict, sizes: dict) -> list[Row]:
    """The rows of one transport: hpcgpu's fused array-sum, then each size on both."""
    plain = {"array_optimize": dask_array_optimize}
    out = [Row(f"hpcgpu {protocol} array-sum {sizes['fused']}x{sizes['fused']} blocks", clients["hpcgpu"],
               lambda: hpcgpu_sum(sizes["fused"]), {})]
    for blocks in sizes["plain"]:
        out.append(Row(f"hpcgpu {protocol} {blocks}x{blocks} blocks", clients["hpcgpu"],
                       lambda b=blocks: hpcgpu_sum(b), {}))
        out.append(Row(f"distributed {protocol} {blocks}x{blocks} blocks", clients["distributed"],
                       lambda b=blocks: dask_sum(b), plain))
    return out


def tasks_after_optimisation(row: Row) -> int:
    with dask.config.set(row.config), row.client.as_current():
        return len(dict(dask.optimize(row.make())[0].__dask_graph__()))


def run(protocols: tuple, sizes: dict, repeats: int, warmup: int = 2) -> dict:
    """Medians per phase for every row, and the round trip per transport, measured interleaved."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        table, trips = [], {}
        for protocol in protocols:
            opened = clusters(protocol, stack)
            table += rows(protocol, opened, sizes)
            trips[f"distributed {protocol} one-task round trip"] = opened["distributed"]
        samples: dict = {row.name: [] for row in table} | {name: [] for name in trips}
        for i in range(warmup + repeats):
            for row in table:
                with row.client.as_current():
                    sample = measure(row)
                if i >= warmup:
                    samples[row.name].append(sample)
            for name, client in trips.items():
                sample = round_trip(client)
                if i >= warmup:
                    samples[name].append(sample)
        tasks = {row.name: tasks_after_optimisation(row) for row in table}
    return {name: dict(tasks=tasks.get(name, 1), runs=len(runs), **medians(runs)) for name, runs in samples.items()}


def medians(runs: list[dict]) -> dict:
    """Median of each phase over ``runs``, in milliseconds."""
    return {phase: round(statistics.median(r[phase] for r in runs) * 1e3, 2) for phase in runs[0]}


def render(results: dict) -> str:
    """The table: a row per graph and transport, a column per phase (ms, medians)."""
    head = f"{'row':44s} {'tasks':>5s} " + " ".join(f"{p:>8s}" for p in PHASES)
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(f"{name:44s} {r['tasks']:5d} " + " ".join(
            f"{r[p]:8.2f}" if p in r else f"{'':8s}" for p in PHASES))
    return "\n".join(lines)


def pieces(blocks: int, repeats: int = 7) -> dict:
    """CPU milliseconds (median) of each per-key step of the fused array-sum, alone in this
    process: Dask's (build, pickle, unpickle, blockwise fusion) and hpcgpu's (the cull that
    makes the lazy blocks, tree fusion), and hpcgpu's whole optimiser (what a scheduler runs
    per ``compute()``). ``--pieces`` prints them."""
    import pickle

    from dask.blockwise import fuse_roots, optimize_blockwise

    from hpcgpu.array.lazy_blocks import culled, lazy_graph
    from hpcgpu.array.optimization import auto_width, fuse_generated_trees, optimize

    y = hpcgpu_sum(blocks)
    keys = list(dask.core.flatten(y.__dask_keys__()))
    data = pickle.dumps(y.__dask_graph__())
    fused = fuse_roots(optimize_blockwise(y.__dask_graph__(), keys=keys), keys=keys)
    lazy = lazy_graph(*culled(fused, keys))
    steps = {"build": lambda: hpcgpu_sum(blocks), "pickle": lambda: pickle.dumps(y.__dask_graph__()),
             "unpickle": lambda: pickle.loads(data),
             "dask blockwise fusion": lambda: fuse_roots(optimize_blockwise(y.__dask_graph__(), keys=keys), keys=keys),
             "hpcgpu cull and lazy blocks": lambda: lazy_graph(*culled(fused, keys)),
             "hpcgpu tree fusion": lambda: fuse_generated_trees(lazy, keys, auto_width(blocks * blocks, 1), True, 256),
             "hpcgpu optimiser, whole": lambda: optimize(y.__dask_graph__(), keys)}
    out = {}
    for name, step in steps.items():
        times = []
        for _ in range(repeats):
            start = time.process_time()
            step()
            times.append(time.process_time() - start)
        out[name] = round(statistics.median(times) * 1e3, 1)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--protocols", help="comma-separated; default tls,tcp (tls with --smoke)")
    parser.add_argument("--json", help="write the medians and the machine here")
    parser.add_argument("--smoke", action="store_true", help="tiny graphs, 2 repeats")
    parser.add_argument("--pieces", action="store_true", help="only the CPU ms of the fused array-sum's steps")
    args = parser.parse_args(argv)
    if args.pieces:
        print(json.dumps(pieces(16 if args.smoke else 50)))
        return
    sizes = {"fused": 50, "plain": (5, 11)}
    if args.smoke:
        sizes, args.repeats = {"fused": 16, "plain": (2,)}, 2
    args.protocols = args.protocols or ("tls" if args.smoke else "tls,tcp")
    load_before = os.getloadavg()[0]  # the machine may be shared: say how busy it was
    results = run(tuple(args.protocols.split(",")), sizes, args.repeats)
    print(render(results), flush=True)
    if args.json:
        record = dict(command=" ".join([sys.argv[0], *(argv or sys.argv[1:])]), machine=platform.node(),
                      cpus=os.cpu_count(), load_average=[load_before, os.getloadavg()[0]],
                      python=platform.python_version(),
                      dask=dask.__version__, repeats=args.repeats, unit="ms, median", rows=results)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
