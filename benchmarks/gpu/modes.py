"""One graph in every mode: the array-sum of docs/benchmarks.md timed where the scheduler
lives in the client's process, in its own process, under ``hpcgpu run`` and under
``hpcgpu.mpi``, beside dask-cuda, on the same GPUs (benchmarks/gpu/run_modes.sh runs it).

    python modes.py local --gpus 4 --out rows.jsonl          # LocalGPUCluster
    python modes.py dask-cuda --gpus 4 --out rows.jsonl      # LocalCUDACluster, the same graph
    python modes.py plain --address tcp://... --gpus 4 ...   # a plain Client to a dask scheduler
    hpcgpu run modes.py run --gpus 4 --out rows.jsonl        # hpcgpu.get_client()
    mpirun -n 4 python -m hpcgpu.mpi modes.py mpi --gpus 4 --out rows.jsonl

Each appends one JSON row: the first (cold) compute, then the best of ``--repeats`` warm
ones, the tasks that ran, and whether the value is right. ``--smoke`` runs a tiny size on
the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import dask
from dask.utils import key_split
from distributed import Client, get_task_stream

import hpcgpu.array as ha


def array_sum(n: int, chunk: int, backend: str):
    """The seed's array-sum on hpcgpu.array: ``(normal(10, 1) + 1)[::2, ::2].sum()``."""
    x = ha.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=42, backend=backend)
    return (x + 1)[::2, ::2].sum()


def measure(client, n: int, chunk: int, backend: str, repeats: int) -> dict:
    """Cold and warm compute times (a new graph each time, as a user's loop makes it)."""
    times, value = [], None
    for _ in range(repeats + 1):
        start = time.perf_counter()
        value = float(client.compute(array_sum(n, chunk, backend)).result())
        times.append(time.perf_counter() - start)
    with get_task_stream(client) as stream:
        client.compute(array_sum(n, chunk, backend)).result()
    expected = 11.0 * ((n + 1) // 2) ** 2
    return {"n": n, "chunk": chunk, "blocks": -(-n // chunk) ** 2, "cold_s": times[0], "warm_s": min(times[1:]),
            "warm_all_s": times[1:], "tasks": len(stream.data),
            "task_kinds": sorted({key_split(t["key"]) for t in stream.data}),
            "value": value, "value_ok": abs(value - expected) / expected < 1e-3}


def cluster_client(mode: str, gpus: int, address: str | None):
    """A client and the cluster it owns (None where the mode's launcher owns it)."""
    devices = [str(i) for i in range(gpus)]
    if mode == "local":
        from hpcgpu import LocalGPUCluster

        cluster = LocalGPUCluster(n_workers=gpus, gpus=devices, dashboard_address=None, silence_logs=40)
        return Client(cluster), cluster
    if mode == "dask-cuda":
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, dashboard_address=None, silence_logs=40)
        return Client(cluster), cluster
    if mode == "plain":
        return Client(address), None
    import hpcgpu

    return hpcgpu.get_client(), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["local", "dask-cuda", "plain", "run", "mpi"])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--address")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2000x2000 in 100x100 blocks, NumPy chunks")
    args = parser.parse_args()
    n, chunk, backend = (2000, 100, "cpu") if args.smoke else (500_000, 10_000, "gpu")
    start = time.perf_counter()
    client, cluster = cluster_client(args.mode, args.gpus, args.address)
    client.wait_for_workers(args.gpus, timeout=300)
    row = {"mode": args.mode, "gpus": args.gpus, "workers": len(client.scheduler_info()["workers"]),
           "transport": client.scheduler.address.split("://")[0], "cluster_s": time.perf_counter() - start,
           "dask": dask.__version__, **measure(client, n, chunk, backend, args.repeats)}
    with open(args.out, "a") as handle:
        handle.write(json.dumps(row) + "\n")
    print(f"{args.mode} {args.gpus} GPU(s) over {row['transport']}: cold {row['cold_s']:.3f} s, "
          f"warm {row['warm_s']:.3f} s, {row['tasks']} tasks, value ok {row['value_ok']}", flush=True)
    client.close()
    if cluster is not None:
        cluster.close()


if __name__ == "__main__":
    main()
