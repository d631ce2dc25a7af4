"""Check a batch-mode cluster: one worker per GPU, each on its own GPU, and a known result.

Run it under ``hpcgpu run`` (any launcher) or ``python -m hpcgpu.mpi``::

    hpcgpu run examples/check_gpu_workers.py --expect 8 --json result.json

Exit code 0 when every check passes, 1 otherwise; ``--exit-code N`` exits with N after the
checks (to test exit-code propagation) and ``--sleep S`` waits S seconds first (to test
cancellation). ``--json`` writes what it saw.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import dask.array as da

import hpcgpu


def gpu_workers(client) -> dict[str, dict]:
    """Worker name -> the GPU metadata its preload registered with the scheduler."""
    return client.run_on_scheduler(
        lambda dask_scheduler: {ws.name: dict(ws.extra.get("hpcgpu", {}), resources=ws.resources)
                                for ws in dask_scheduler.workers.values()}
    )


def run_checks(client, expect: int) -> dict:
    """Check the cluster behind ``client``; returns what was seen and each check's verdict."""
    workers = gpu_workers(client)
    # Where each worker's GPU is: its node and GPU (UUID when a GPU is there, else the index).
    places = {name: (w.get("node"), w.get("uuid") or w.get("cuda_visible_devices"))
              for name, w in workers.items()}
    total = da.arange(100_000, chunks=10_000).sum().compute()
    per_worker = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
    checks = {
        "count": len(workers) == expect,
        "distinct_gpus": len(set(places.values())) == len(workers),
        "one_gpu_each": all(w.get("resources") == {"GPU": 1.0} for w in workers.values())
        and all(v is not None and "," not in v for v in per_worker.values()),
        "sum": int(total) == 100_000 * 99_999 // 2,
    }
    return {"workers": workers, "places": {k: list(v) for k, v in places.items()},
            "checks": checks, "scheduler": client.scheduler.address}


def report(result: dict, path: str | None) -> None:
    """Print the verdicts and places; write everything to ``path`` as JSON if given."""
    if path:
        with open(path, "w") as handle:
            json.dump(result, handle, indent=1, default=str)
    print(json.dumps({"checks": result["checks"], "places": result["places"]}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", type=int, default=int(os.environ.get("HPCGPU_N_WORKERS", "0")))
    parser.add_argument("--json", default=None)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int, default=None)
    parser.add_argument("--marker", default=None, help="File written once connected.")
    ns = parser.parse_args()
    client = hpcgpu.get_client()
    if ns.marker:
        open(ns.marker, "w").write(str(os.getpid()))
    time.sleep(ns.sleep)
    result = run_checks(client, ns.expect)
    report(result, ns.json)
    client.close()
    if ns.exit_code is not None:
        return ns.exit_code
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
