"""Where the published persist step's time goes with two or more GPUs: dask-cuda beside
hpcgpu with TLS on and off, the step run as ``published_code.py`` runs it, several times on
one cluster, with each worker's incoming transfers (bytes, seconds) and the TLS cipher.

    python benchmarks/gpu/persist_probe.py --gpus 0,1 --repeats 4 --out DIR
    python benchmarks/gpu/persist_probe.py --cpu --gpus 0,1 --repeats 2   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

from published_code import load_steps, sizes_for  # noqa: E402


def _transfers(dask_worker):
    log = list(dask_worker.transfer_incoming_log)
    dask_worker.transfer_incoming_log.clear()
    return [(t["total"], t["duration"]) for t in log]


def _ciphers(dask_worker):
    pool = dask_worker.rpc
    out = set()
    for comms in getattr(pool, "available", {}).values():
        for comm in comms:
            cipher = getattr(comm, "_extra", {}).get("cipher")
            if cipher:
                out.add(f"{cipher[1]} {cipher[0]}")
    return sorted(out)


def probe(flavor: str, s: dict, repeats: int, cpu: bool = False, switch: float | None = None) -> dict:
    from distributed import wait

    steps = load_steps(flavor, cpu)
    t0 = time.perf_counter()
    cluster, client = steps.start_cluster(s)
    started = time.perf_counter() - t0
    steps.set_allocator(client)
    if switch is not None:  # how often a thread holding the GIL must give it up
        client.run(sys.setswitchinterval, switch)
    rows = []
    try:
        for r in range(repeats):
            client.run(_transfers)
            rs = steps.da.random.RandomState(RandomState=steps.cupy.random.RandomState)
            a = time.perf_counter()
            x = rs.random((s["persist_n"], s["persist_n"]), chunks=s["persist_chunks"]).persist()
            wait(x)
            b = time.perf_counter()
            total = (x + x.T).sum().compute()
            c = time.perf_counter()
            moved = client.run(_transfers)
            nbytes = sum(n for w in moved.values() for n, _ in w)
            seconds = [d for w in moved.values() for _, d in w]
            rows.append(dict(persist=b - a, sum=c - b, step=c - a, moved_bytes=nbytes, transfers=len(seconds),
                             transfer_seconds_total=sum(seconds),
                             transfer_gib_s=(nbytes / 2**30 / sum(seconds)) if seconds else None,
                             value=float(total)))
            print(f"{flavor:<11} {r} persist {b - a:.3f} sum {c - b:.3f} moved {nbytes / 2**30:.2f} GiB in "
                  f"{len(seconds)} transfers, {sum(seconds):.3f} s summed", flush=True)
            del x
        ciphers = client.run(_ciphers)
    finally:
        client.close()
        cluster.close()
    return dict(flavor=flavor, start=started, rows=rows, ciphers=ciphers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--sizes", default="quick")
    parser.add_argument("--flavors", default="dask-cuda,hpcgpu,hpcgpu-tcp")
    parser.add_argument("--out", default=".")
    parser.add_argument("--switch-interval", type=float, help="the workers' sys.setswitchinterval")
    parser.add_argument("--cpu", action="store_true", help="NumPy, tiny (a smoke run without GPUs)")
    args = parser.parse_args()
    s = sizes_for("cpu" if args.cpu else args.sizes, args.gpus)
    results = []
    for flavor in args.flavors.split(","):
        results.append(probe(flavor, s, args.repeats, args.cpu, args.switch_interval))
        Path(args.out, "persist_probe.json").write_text(json.dumps(results, indent=1))
    for res in results:
        later = res["rows"][1:] or res["rows"]
        print(f"{res['flavor']:<11} median step {statistics.median(r['step'] for r in later):.3f} s "
              f"(persist {statistics.median(r['persist'] for r in later):.3f}, sum "
              f"{statistics.median(r['sum'] for r in later):.3f}), ciphers {res['ciphers']}")


if __name__ == "__main__":
    main()
