"""Scale-out proxy on CPU workers: the registry's communication workloads on 1, 2, 4 workers.

What it stands for: several GPU workers of one host exchanging chunks. Here each worker
is a CPU process of ``LocalGPUCluster`` (NumPy chunks, one thread), on this host's
loopback, over TLS (the default) and plain TCP. It shows what does not depend on the GPU:
how many bytes each workload moves between workers and how its chunks are placed
(``bytes moved``, from the workers' ``transfer_incoming_log``), the serialisation and
transport cost of moving them (``bound``: bytes / the loopback bandwidth of that transport,
measured in the same run), scheduling, and the reduction trees' shape.

What it cannot show: NVLink, InfiniBand or UCX bandwidth, GPU kernel times, GPU memory
and spilling; and on a host with fewer cores than workers, parallel speed-up (the
workers share the cores: time beside the bound and bytes moved is what carries over).

Workloads (issue 29's reference sizes, every side times ``--scale``, chunk counts kept):
transpose-sum 40000^2 in 5000^2; rechunk 40000^2 row blocks -> column blocks; matmul
20000^2 in 5000^2; svd 100000x1000 in 1000-row chunks; groupby over 30 days at 1 s (rows
times scale); array-sum's tree 500000^2 in 10000^2 (sides times scale / 10: its data never
moves, only its tree). Each with its input generated in the timed graph and persisted
before it; hpcgpu's collections (``hpcgpu.array``, ``hpcgpu.dataframe``) and plain Dask on
the same cluster; with ``placement`` ``dask`` (distributed's own) and ``colocate``
(:class:`hpcgpu.network.colocate.CoLocateRoots`) for generated inputs. Repeats are
interleaved over worker counts and cases; the table gives medians.

    python benchmarks/scaleout_proxy.py --out benchmarks/results/cpu   # record
    python benchmarks/scaleout_proxy.py --smoke --out /tmp/proxy       # seconds: every case once, tiny

Writes ``scaleout_proxy.json`` and ``scaleout_proxy.md`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
import warnings
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcgpu.system.workers import scheduler_workers
from hpcgpu.bench.registry import RunContext, Size, get_workload  # noqa: E402
from hpcgpu.network.colocate import CoLocateRoots  # noqa: E402

MB = 1e6


def _side(value: int, scale: float) -> int:
    return max(1, round(value * scale))


def sizes(scale: float) -> dict[str, dict]:
    """Registry parameters of each workload at ``scale`` of issue 29's reference sizes.

    Examples
    --------
    >>> sizes(0.1)["transpose-sum"], sizes(0.1)["groupby"]
    ({'n': 4000, 'chunk': 500}, {'days': 30, 'freq': '10s'})
    """
    s = lambda v: _side(v, scale)  # noqa: E731
    return {
        "transpose-sum": {"n": s(40000), "chunk": s(5000)},
        "rechunk": {"shape": (s(40000), s(40000)), "chunk": s(5000)},
        "matmul": {"shape": (s(20000), s(20000)), "chunk": s(5000)},
        "svd": {"shape": (s(100000), s(1000)), "chunk": s(1000)},
        "groupby": {"days": 30, "freq": f"{max(1, round(1 / scale))}s"},
        "array-sum": {"shape": (s(50000),) * 2, "chunk": s(1000)},
    }


#: ``--smoke``: every workload at 2 x 2 chunks or so (groupby: two days at 1 min), so that
#: each case takes a fraction of a second; it checks that every case runs, not the shapes.
SMOKE_SIZES = {
    "transpose-sum": {"n": 400, "chunk": 200},
    "rechunk": {"shape": (400, 400), "chunk": 200},
    "matmul": {"shape": (400, 400), "chunk": 200},
    "svd": {"shape": (2000, 20), "chunk": 500},
    "groupby": {"days": 2, "freq": "60s"},
    "array-sum": {"shape": (400, 400), "chunk": 200},
}


def cases(workloads: list[str], libraries: list[str], workers: int, exclude=()) -> list[dict]:
    """The cases one repeat runs on a cluster of ``workers`` workers (less ``workload:library``
    pairs in ``exclude``).

    Examples
    --------
    >>> [(c["inputs"], c["placement"]) for c in cases(["svd"], ["hpcgpu", "dask"], 2, ["svd:dask"])]
    [('generated', 'dask'), ('generated', 'colocate'), ('persisted', 'dask'), ('persisted', 'colocate')]
    """
    out = []
    for name in workloads:
        for library in [lib for lib in libraries if f"{name}:{lib}" not in exclude]:
            modes = ("generated",) if name == "array-sum" else ("generated", "persisted")
            for mode in modes:
                places = ("dask", "colocate") if workers > 1 else ("dask",)
                out += [dict(workload=name, inputs=mode, library=library, placement=p) for p in places]
    return out


def _set_placement(dask_scheduler, active: bool) -> None:
    dask_scheduler.plugins[CoLocateRoots.name].active = active


def _clear_log(dask_worker) -> None:
    dask_worker.transfer_incoming_log.clear()


def _moved(dask_worker) -> tuple[int, int]:
    log = list(dask_worker.transfer_incoming_log)
    return sum(e["total"] for e in log), len(log)


def _scheduler_tasks(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


def run_case(client, case: dict, params: dict) -> dict:
    """One timed run: input prepared (untimed), transfer logs cleared, the workload timed."""
    workload = get_workload(case["workload"])
    ctx = RunContext(client=client, gpus=len(scheduler_workers(client)),
                     library=case["library"], timeout=600)
    size = Size(case["workload"], 0.0, "B", dict(params, generated=case["inputs"] == "generated"))
    client.run_on_scheduler(_set_placement, active=case["placement"] == "colocate")
    with client.as_current():
        state = workload.prepare(ctx, size) if workload.prepare else None
        client.run(_clear_log)
        start = time.perf_counter()
        result = workload.run(ctx, size, state)
        seconds = time.perf_counter() - start
    moved = client.run(_moved).values()
    del state
    _wait_released(client)
    return dict(case, seconds=seconds, bytes=sum(b for b, _ in moved), transfers=sum(n for _, n in moved),
                result=result if isinstance(result, (int, float)) else None)


def _wait_released(client, timeout: float = 30.0) -> None:
    """Until the scheduler holds no task: the next case starts on empty workers."""
    deadline = time.monotonic() + timeout
    while client.run_on_scheduler(_scheduler_tasks) and time.monotonic() < deadline:
        time.sleep(0.02)


def _produce(nbytes: int, tag: int):
    import numpy

    return numpy.full(nbytes // 8, tag, dtype="float64")


def bandwidth(client, nbytes: int, repeats: int = 5) -> float | None:
    """Median bytes/s of one chunk of ``nbytes`` moved between two workers (their transfer log)."""
    workers = sorted(scheduler_workers(client))
    if len(workers) < 2:
        return None
    rates = []
    for tag in range(repeats):
        client.run(_clear_log)
        chunk = client.submit(_produce, nbytes, tag, workers=[workers[0]], pure=False)
        client.submit(len, chunk, workers=[workers[1]], pure=False).result()
        log = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log), workers=[workers[1]])
        entry = max(log[workers[1]], key=lambda e: e["total"])
        rates.append(entry["total"] / entry["duration"])
        del chunk
    return statistics.median(rates)


def start_clusters(stack: ExitStack, transport: str, counts: list[int]) -> dict:
    """``{workers: client}``: one LocalGPUCluster of CPU workers per count, all up at once
    so that repeats interleave over counts."""
    from distributed import Client

    from hpcgpu.cluster.local import LocalGPUCluster

    clients = {}
    for n in counts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # security=False warns that plain TCP is open
            cluster = stack.enter_context(LocalGPUCluster(
                n_workers=n, gpus=[], threads_per_worker=1, dashboard_address=None, silence_logs=logging.ERROR,
                security=None if transport == "tls" else False))
        clients[n] = stack.enter_context(Client(cluster, set_as_default=False))
        clients[n].wait_for_workers(n, timeout=120)
    return clients


def measure(args, save=None) -> dict:
    """Bandwidth per transport, then ``--warmup`` + ``--repeats`` rounds, each over every
    transport, worker count and case; ``save(data)`` after each counted round."""
    params, warm = sizes(args.scale), sizes(args.scale / 10)  # warm-up: first-call costs, not the size
    if args.smoke:
        params = warm = SMOKE_SIZES
    data = {"params": {k: params[k] for k in args.workloads}, "bandwidth": {}, "runs": []}
    with ExitStack() as stack:
        clusters = {t: start_clusters(stack, t, args.workers) for t in args.transports}
        for transport, clients in clusters.items():
            data["bandwidth"][transport] = bandwidth(clients[max(args.workers)], int(args.link_mb * MB))
        for repeat in range(args.warmup + args.repeats):
            for transport, clients in clusters.items():
                for n, client in clients.items():
                    for case in cases(args.workloads, args.libraries, n, args.exclude):
                        record = run_case(client, case, (params if repeat >= args.warmup else warm)[case["workload"]])
                        if repeat >= args.warmup:
                            data["runs"].append(dict(record, transport=transport, workers=n, repeat=repeat))
                        print(f"{transport} {n} {case} {record['seconds']:.3f} s {record['bytes'] / MB:.1f} MB",
                              file=sys.stderr, flush=True)
            if save and repeat >= args.warmup:
                save(data)
    return data


def summarise(data: dict) -> list[dict]:
    """One row per case, transport and worker count: medians, bound, speed-up over the
    same case on 1 worker (Dask's placement there: with one worker there is no other)."""
    groups: dict = {}
    for r in data["runs"]:
        key = (r["workload"], r["inputs"], r["library"], r["transport"], r["workers"], r["placement"])
        groups.setdefault(key, []).append(r)
    median = {key: statistics.median(r["seconds"] for r in rs) for key, rs in groups.items()}
    rows = []
    for key in sorted(groups, key=lambda k: (*k[:5], k[5] != "dask")):
        rs, base = groups[key], median.get((*key[:4], 1, "dask"))
        moved = statistics.median(r["bytes"] for r in rs)
        link = data["bandwidth"].get(key[3])
        rows.append(dict(zip(("workload", "inputs", "library", "transport", "workers", "placement"), key),
                         seconds=median[key], runs=len(rs), mb_moved=moved / MB,
                         bound_s=moved / link if link else 0.0, speedup=base / median[key] if base else None,
                         results=sorted({r["result"] for r in rs if r["result"] is not None})))
    return rows


def render(rows: list[dict], data: dict) -> str:
    """The markdown table, its header saying what the proxy stands for and what it cannot show."""
    doc = __doc__.split("\n\n")
    links = ", ".join(f"{t} {bw / 1e9:.2f} GB/s" for t, bw in data["bandwidth"].items() if bw)
    machine = (f"Machine: {data['machine']}. Loopback bandwidth (one chunk of {data['args']['link_mb']:g} MB "
               f"between two workers, median): {links}. Scale {data['args']['scale']:g}, median of "
               f"{data['repeats_done']} interleaved repeats. Command: `{data['command']}`")
    head = ["# Scale-out proxy: CPU workers on one host", "", doc[1].replace("\n", " "), "",
            doc[2].replace("\n", " "), "", machine, "",
            "| workload | inputs | library | transport | workers | placement | median s | speed-up vs 1 | "
            "MB moved | bound s | time / bound |",
            "| --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ratio = f"{r['seconds'] / r['bound_s']:.1f}" if r["bound_s"] >= 1e-3 else "–"  # nothing to bound
        speedup = f"{r['speedup']:.2f}" if r["speedup"] else "–"
        head.append(f"| {r['workload']} | {r['inputs']} | {r['library']} | {r['transport']} | {r['workers']} | "
                    f"{r['placement']} | {r['seconds']:.3f} | {speedup} | {r['mb_moved']:.1f} | {r['bound_s']:.3f} | "
                    f"{ratio} |")
    return "\n".join(head) + "\n"


def _parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split = lambda v: [x for x in v.split(",") if x]  # noqa: E731
    parser.add_argument("--workers", type=lambda v: [int(x) for x in split(v)], default=[1, 2, 4])
    parser.add_argument("--transports", type=split, default=None, help="default: tls,tcp (--smoke: tcp)")
    parser.add_argument("--workloads", type=split,
                        default=["transpose-sum", "rechunk", "matmul", "svd", "groupby", "array-sum"])
    parser.add_argument("--libraries", type=split, default=["hpcgpu", "dask"])
    parser.add_argument("--exclude", type=split, default=[], help="workload:library pairs to leave out")
    parser.add_argument("--scale", type=float, default=0.1, help="every side of the reference sizes times this")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first at a tenth of the scale, not counted")
    parser.add_argument("--link-mb", type=float, default=32.0, help="chunk size of the bandwidth measurement")
    parser.add_argument("--smoke", action="store_true",
                        help="every case once at tiny sizes, 1 and 2 workers, TCP: seconds")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--from-json", type=Path, default=None, help="re-render a record's table, run nothing")
    args = parser.parse_args(argv)
    if args.transports is None:
        args.transports = ["tcp"] if args.smoke else ["tls", "tcp"]
    if args.smoke:
        args.scale, args.repeats, args.warmup, args.link_mb = 0.01, 1, 0, 4.0
        args.workers = [w for w in args.workers if w <= 2]
    return args


def write(data: dict, args, load: tuple, argv) -> str:
    """Summarise ``data`` and write the JSON and markdown records (when ``--out``)."""
    data.update(args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                command="python benchmarks/scaleout_proxy.py " + " ".join(sys.argv[1:] if argv is None else argv),
                machine=f"{os.cpu_count()} cores, load average {load[0]:.1f} at the start and "
                        f"{os.getloadavg()[0]:.1f} at the end (1 min)",
                repeats_done=len({r["repeat"] for r in data["runs"]}))
    data["rows"] = summarise(data)
    table = render(data["rows"], data)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scaleout_proxy.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
        (args.out / "scaleout_proxy.md").write_text(table)
    return table


def main(argv=None) -> int:
    args = _parse(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        data["rows"] = summarise(data)
        print(render(data["rows"], data))
        return 0
    load = os.getloadavg()
    data = measure(args, save=lambda d: write(d, args, load, argv))
    print(write(data, args, load, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
