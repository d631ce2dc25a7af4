"""The cost of ``client.run`` on a LocalGPUCluster (CPU mode) beside distributed's LocalCluster.

Rows: both clusters (``n_workers=1``, one thread, no dashboard, worker processes), over TLS
with the same temporary certificate (hpcgpu's ECDSA one) and over TCP. Columns, in ms:

- ``first``: the first ``client.run(abs, 1)`` after the cluster started (a fresh cluster per
  sample): the scheduler's first connection to the worker, the worker's first accept;
- ``reconnect``: a ``client.run`` after the scheduler dropped its pooled connections to the
  worker: a new connection (TCP connect, TLS handshake, distributed's handshake) in processes
  that made one before;
- ``later``: every further call on a kept connection.

Samples are taken interleaved across the four clusters, so load from other processes falls on
all alike; medians, and the ratio hpcgpu / distributed per transport::

    python benchmarks/run_cost.py --fresh 8 --repeats 20 --json benchmarks/results/cpu/run_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from contextlib import ExitStack

import dask
from distributed import Client, LocalCluster

from hpcgpu.system.workers import scheduler_workers
from hpcgpu.cluster.local import LocalGPUCluster
from hpcgpu.network.tls import temporary_security

KINDS = ("hpcgpu", "distributed")
PROTOCOLS = ("tls", "tcp")


def open_cluster(kind: str, protocol: str, security, stack: ExitStack) -> Client:
    """A one-worker cluster of ``kind`` over ``protocol`` and its client, closed with ``stack``."""
    options = dict(n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=40,
                   protocol=f"{protocol}://")
    if kind == "hpcgpu":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # security=False's warning
            cluster = LocalGPUCluster(gpus=[], security=security or False, **options)
    else:
        cluster = LocalCluster(processes=True, security=security, **options)
    stack.enter_context(cluster)
    return stack.enter_context(Client(cluster, security=security))


def timed_run(client: Client) -> float:
    start = time.perf_counter()
    client.run(abs, 1)
    return time.perf_counter() - start


def _drop(dask_scheduler, address: str) -> None:
    dask_scheduler.rpc.remove(address)  # closes the scheduler's pooled comms to the worker


def first_calls(fresh: int, security) -> dict:
    """``{row: [seconds of the first client.run]}``, a fresh cluster per sample."""
    out: dict = {}
    for _ in range(fresh):
        for protocol in PROTOCOLS:
            for kind in KINDS:
                with ExitStack() as stack:
                    client = open_cluster(kind, protocol, security if protocol == "tls" else None, stack)
                    out.setdefault(f"{kind} {protocol}", []).append(timed_run(client))
    return out


def later_calls(repeats: int, per_round: int, security) -> tuple[dict, dict]:
    """``({row: [reconnect seconds]}, {row: [later seconds]})`` on clusters kept open."""
    reconnect: dict = {}
    later: dict = {}
    with ExitStack() as stack:
        clients = {f"{kind} {protocol}": open_cluster(kind, protocol, security if protocol == "tls" else None, stack)
                   for protocol in PROTOCOLS for kind in KINDS}
        for client in clients.values():
            client.run(abs, 1)
        for _ in range(repeats):
            for row, client in clients.items():
                (address,) = scheduler_workers(client)
                client.run_on_scheduler(_drop, address=address)
                reconnect.setdefault(row, []).append(timed_run(client))
                later.setdefault(row, []).extend(timed_run(client) for _ in range(per_round))
    return reconnect, later


def summarise(columns: dict) -> dict:
    """Medians in ms per row and column, and hpcgpu / distributed per transport."""
    rows: dict = {}
    for column, samples in columns.items():
        for row, values in samples.items():
            rows.setdefault(row, {})[column] = round(statistics.median(values) * 1e3, 2)
            rows[row][f"{column}_samples"] = len(values)
    ratios = {f"{protocol} {column}": round(rows[f"hpcgpu {protocol}"][column] / rows[f"distributed {protocol}"][column], 2)
              for protocol in PROTOCOLS for column in columns}
    return dict(rows=rows, ratio_hpcgpu_to_distributed=ratios)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", type=int, default=8, help="fresh clusters per row for 'first'")
    parser.add_argument("--repeats", type=int, default=20, help="reconnects per row")
    parser.add_argument("--per-round", type=int, default=10, help="later calls after each reconnect")
    parser.add_argument("--json", help="write the medians and the machine here")
    args = parser.parse_args(argv)
    security = temporary_security()
    load_before = os.getloadavg()[0]
    first = first_calls(args.fresh, security)
    reconnect, later = later_calls(args.repeats, args.per_round, security)
    result = summarise(dict(first=first, reconnect=reconnect, later=later))
    for row, r in result["rows"].items():
        print(f"{row:18s} first {r['first']:7.2f}  reconnect {r['reconnect']:6.2f}  later {r['later']:5.2f} ms")
    print("hpcgpu / distributed:", result["ratio_hpcgpu_to_distributed"])
    if args.json:
        record = dict(command=" ".join(["benchmarks/run_cost.py", *(argv or sys.argv[1:])]), machine=platform.node(),
                      cpus=os.cpu_count(), load_average=[load_before, os.getloadavg()[0]],
                      python=platform.python_version(), dask=dask.__version__, unit="ms, median", **result)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
