"""Communication benchmark: hpcgpu's GPU workers over UCX and TCP beside dask-cuda's.

Workloads (one GPU per worker, all GPUs of one host):

* transpose-sum, dask-cuda's ``local_cupy``: ``(x + x.T).sum()`` on a 40000 x 40000
  CuPy array in 5000 x 5000 chunks; throughput = ``x.nbytes`` / wall time, as dask-cuda
  reports it;
* point-to-point: a CuPy array made on worker 0 and used by a task on worker 1, several
  sizes; bandwidth from distributed's own transfer log and end to end.

Each case runs in its own process (UCX is set up once per process):

* ``hpcgpu-ucx``: ``python -m hpcgpu.worker`` workers (the ``direct`` launcher, one per
  GPU), configured by :mod:`hpcgpu.network`, transports auto;
* ``hpcgpu-ucx-pool``: the same with an RMM pool for UCX's receive buffers
  (``distributed-ucxx.rmm.pool-size``, ``--pool-size``), so receiving allocates no memory;
* ``hpcgpu-ucx-nvlink``: the same with ``transports="nvlink"``;
* ``hpcgpu-fallback-tcp``: ``protocol="ucx", fallback="tcp"`` resolved as if
  distributed-ucxx were missing: the cost of the TCP fallback;
* ``dask-cuda-ucx``, ``dask-cuda-tcp``: ``LocalCUDACluster`` with that protocol.

    python benchmarks/comms.py --out "$OUT"            # all cases, 4 GPUs
    python benchmarks/comms.py --cpu --size 4000 --chunk 1000 --cases hpcgpu-ucx  # plumbing, no GPU

Writes ``comms.json`` and ``comms.md`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hpcgpu.system.workers import scheduler_workers
from hpcgpu.worker.startfailure import wait_for_workers_or_exit  # noqa: E402
CASES = ("dask-cuda-ucx", "hpcgpu-ucx", "hpcgpu-ucx-pool", "hpcgpu-ucx-nvlink", "dask-cuda-tcp",
         "hpcgpu-fallback-tcp")
GIB = 2**30


def _hpcgpu_cluster(stack: ExitStack, case: str, args) -> tuple[str, dict]:
    """A scheduler here and ``python -m hpcgpu.worker --launcher direct`` spawning one worker per GPU."""
    from distributed import Scheduler, SpecCluster

    from hpcgpu.network import (NetworkSettings, config_context, job_environment, resolve,
                                scheduler_options, worker_options)
    from hpcgpu.jobspec.worker_command import WorkerCommand

    if case == "hpcgpu-fallback-tcp":
        settings = resolve(NetworkSettings.create("ucx", interface=args.interface, fallback="tcp"),
                           reason="distributed-ucxx is unavailable (simulated by benchmarks/comms.py)")
    else:
        transports = "nvlink" if case.endswith("nvlink") and not args.cpu else "auto"
        settings = resolve(NetworkSettings.create("ucx", transports=transports, interface=args.interface))
    stack.enter_context(config_context(settings, "client", gpu=False))
    spec = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0",
                                          **scheduler_options(settings)}}
    cluster = stack.enter_context(SpecCluster(scheduler=spec, workers={}))
    env = dict(os.environ, **dict(job_environment(settings, "worker", gpu=not args.cpu)))
    if case.endswith("pool") and not args.cpu:
        env["DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE"] = args.pool_size
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(args.gpus)))
    command = WorkerCommand(scheduler=cluster.scheduler_address, name="bench", nthreads=1,
                            launcher="direct", gpus_per_node=args.gpus, **worker_options(settings))
    log = stack.enter_context(tempfile.NamedTemporaryFile("w+", prefix="hpcgpu-bench-workers-", suffix=".log"))
    proc = subprocess.Popen(command.argv(sys.executable), env=env, stderr=subprocess.STDOUT, stdout=log)
    stack.callback(lambda: (proc.terminate(), proc.wait(60)))
    # a worker that cannot start ends this process at once: say why instead of waiting
    watch = {"exit_code": proc.poll, "log": lambda: Path(log.name).read_text(errors="replace")}
    return cluster.scheduler_address, {"settings": repr(settings), "worker_env": job_environment(settings, "worker"),
                                       "_watch": watch}


def _dask_cuda_cluster(stack: ExitStack, case: str, args) -> tuple[str, dict]:
    from dask_cuda import LocalCUDACluster

    protocol = "ucx" if case.endswith("ucx") else "tcp"
    cluster = stack.enter_context(LocalCUDACluster(
        n_workers=args.gpus, CUDA_VISIBLE_DEVICES=list(range(args.gpus)), protocol=protocol,
        interface=args.interface, threads_per_worker=1, dashboard_address=":0"))
    return cluster.scheduler_address, {"protocol": protocol}


def _random(args):
    import dask.array as da

    if args.cpu:
        import numpy as backend
    else:
        import cupy as backend
    rs = da.random.RandomState(RandomState=backend.random.RandomState)
    return rs.random((args.size, args.size), chunks=args.chunk)


def _transpose_sum(client, args) -> dict:
    from distributed import wait

    times, moved = [], []
    for _ in range(args.warmup + args.repeat):
        # a fresh x every repeat: with one x, the warm-up's copies of fetched chunks stay on
        # the workers until Dask's memory manager drops them (every 2 s), so whether a repeat
        # moves any chunk at all depended on timing (seen: 60 MB, then 4 MB, then nothing)
        x = _random(args).persist()
        wait(x)
        since = time.time()
        start = time.perf_counter()
        y = client.persist((x + x.T).sum())
        wait(y)
        times.append(time.perf_counter() - start)
        moved.append(sum(client.run(_bytes_received_since, since=since).values()))
        value = client.submit(float, y).result()
        nbytes = x.nbytes
        del x, y
    timed = times[args.warmup:]
    return {"nbytes": nbytes, "times_s": timed, "bytes_moved": moved[args.warmup:],
            "median_s": statistics.median(timed), "best_s": min(timed),
            "gib_per_s": nbytes / statistics.median(timed) / GIB, "value": value}


def _bytes_received_since(dask_worker, since: float) -> int:
    """Bytes this worker fetched from its peers since ``since`` (its transfer log)."""
    return int(sum(entry["total"] for entry in dask_worker.transfer_incoming_log if entry["start"] >= since))


def _make(nbytes: int, tag: int, cpu: bool):
    import numpy
    backend = numpy if cpu else __import__("cupy")
    return backend.ones(nbytes // 8, dtype="f8")


def _last_incoming(dask_worker):
    log = list(dask_worker.transfer_incoming_log)
    return log[-1] if log else None


def _p2p(client, args) -> list[dict]:
    from distributed import wait

    workers = sorted(scheduler_workers(client))
    a, b = workers[0], workers[1]
    rows = []
    for size in args.p2p_sizes:
        e2e, wire = [], []
        for rep in range(args.warmup + args.repeat):
            src = client.submit(_make, size, rep, args.cpu, workers=[a], pure=False)
            wait(src)
            start = time.perf_counter()
            dst = client.submit(len, src, workers=[b], pure=False)
            dst.result()
            elapsed = time.perf_counter() - start
            entry = client.run(_last_incoming, workers=[b])[b]
            if rep >= args.warmup:
                e2e.append(size / elapsed / GIB)
                if entry and entry["total"] >= size:
                    wire.append(entry["total"] / max(entry["duration"], 1e-9) / GIB)
            client.cancel([src, dst])
        rows.append({"bytes": size, "end_to_end_gib_per_s": statistics.median(e2e),
                     "transfer_gib_per_s": statistics.median(wire) if wire else None,
                     "best_transfer_gib_per_s": max(wire) if wire else None})
    return rows


def _worker_view(dask_worker):
    out = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "ucx_tls": None}
    if not dask_worker.address.startswith("ucx"):
        return out
    try:
        import ucxx

        out["ucx_tls"] = ucxx.get_config().get("TLS")
    except Exception as exc:  # not a UCX worker
        out["ucx_tls"] = f"n/a ({type(exc).__name__})"
    return out


def run_case(case: str, args, path: Path) -> dict:
    """One case in this process: start the cluster, run both workloads, write the record
    to ``path`` (before the cluster shuts down: a hang there loses nothing)."""
    from distributed import Client

    start = time.perf_counter()
    with ExitStack() as stack:
        starter = _dask_cuda_cluster if case.startswith("dask-cuda") else _hpcgpu_cluster
        address, info = starter(stack, case, args)
        client = stack.enter_context(Client(address))
        watch = info.pop("_watch", None)
        if watch:
            wait_for_workers_or_exit(lambda: len(client.nthreads()), args.gpus, timeout=180, **watch)
        else:
            client.wait_for_workers(args.gpus, timeout=180)
        record = {"case": case, "address": address, **info, "startup_s": time.perf_counter() - start,
                  "workers": client.run(_worker_view)}
        record["transpose_sum"] = _transpose_sum(client, args)
        record["p2p"] = _p2p(client, args)
        path.write_text(json.dumps(record, indent=2, default=str))
    return record


def _table(records: list[dict]) -> str:
    """Markdown: transpose-sum time and throughput, P2P transfer (end-to-end) GiB/s per size."""
    if not records:
        return "(no results)"
    sizes = [r["bytes"] for r in records[0]["p2p"]]
    head = ["case", "transpose-sum median (s)", "GiB/s", *(f"P2P {s // 2**20} MiB" for s in sizes)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in records:
        ts = rec["transpose_sum"]
        p2p = [f"{r['transfer_gib_per_s'] or 0:.3g} ({r['end_to_end_gib_per_s']:.3g})" for r in rec["p2p"]]
        lines.append("| " + " | ".join([rec["case"], f"{ts['median_s']:.3f}", f"{ts['gib_per_s']:.3g}", *p2p]) + " |")
    return "\n".join(lines)


def _parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "comms-out"))
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--size", type=int, default=40000)
    parser.add_argument("--chunk", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--p2p-sizes", default="1MiB,16MiB,256MiB,1GiB")
    parser.add_argument("--interface", default=None, help="e.g. lo; default: the host's address")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--case-timeout", type=float, default=150)
    parser.add_argument("--budget", type=float, default=330, help="seconds for all cases")
    parser.add_argument("--pool-size", default="16GiB", help="RMM pool of the -pool case")
    parser.add_argument("--cpu", action="store_true", help="NumPy instead of CuPy, no GPU (plumbing check)")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from dask.utils import parse_bytes

    args.p2p_sizes = [parse_bytes(s) for s in args.p2p_sizes.split(",")]
    return args


def main(argv=None) -> int:
    args = _parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.case:  # child: one case, record to a file
        run_case(args.case, args, out / f"case-{args.case}.json")
        return 0
    records, failures, began = [], {}, time.monotonic()
    child_argv = [a for a in (argv if argv is not None else sys.argv[1:])]
    for case in [c for c in args.cases.split(",") if c]:
        left = args.budget - (time.monotonic() - began)
        if left < 30:
            failures[case] = "skipped: time budget spent"
            continue
        log = open(out / f"case-{case}.log", "w")
        try:
            done = subprocess.run([sys.executable, __file__, *child_argv, "--case", case],
                                  stdout=log, stderr=subprocess.STDOUT, timeout=min(args.case_timeout, left))
            failed = done.returncode != 0 and f"exit code {done.returncode} (see case-{case}.log)"
        except subprocess.TimeoutExpired:
            failed = f"timed out after {min(args.case_timeout, left):.0f} s (see case-{case}.log)"
        path = out / f"case-{case}.json"
        if path.exists():
            records.append(json.loads(path.read_text()))
        else:
            failures[case] = failed or "no record"
        print(f"{case}: {'ok' if path.exists() else failures[case]} ({time.monotonic() - began:.0f} s)", flush=True)
    report = {"args": {k: v for k, v in vars(args).items() if k != "case"}, "records": records,
              "failures": failures, "host": os.uname().nodename, "wall_s": time.monotonic() - began}
    try:
        from hpcgpu.doctor import diagnose
        from hpcgpu.network import NetworkSettings

        report["doctor"] = diagnose(NetworkSettings.create("ucx"), role="compute")
    except Exception as exc:
        report["doctor"] = f"{type(exc).__name__}: {exc}"
    (out / "comms.json").write_text(json.dumps(report, indent=2, default=str))
    table = _table(records)
    note = "\n".join(f"- {c}: {why}" for c, why in failures.items())
    (out / "comms.md").write_text(
        f"# Communication benchmark ({report['host']}, {args.gpus} GPUs)\n\n{table}\n\n"
        "P2P: GiB/s of the transfer as distributed logs it (end to end, with task overhead).\n\n"
        f"{note}\n")
    print(table)
    print(note)
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
