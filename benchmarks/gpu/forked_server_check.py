"""GPU check of the worker start designs: ``python -m hpcgpu.worker --gpus-per-node all``
with each ``--multiprocessing-method`` on this machine's GPUs; each worker must see its own
GPU through CuPy (a CUDA context made after the fork) and compute on it.

    python benchmarks/gpu/forked_server_check.py [--methods forked-server,forkserver,spawn]

Prints one JSON line per method: seconds to all workers connected, each worker's
CUDA_VISIBLE_DEVICES and device name, and a checked CuPy sum.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from distributed import Client


def check(method: str, gpus: int) -> dict:
    work = tempfile.mkdtemp(prefix="forked-check-")
    sched_file = os.path.join(work, "scheduler.json")
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file",
                                  sched_file, "--no-dashboard", "--host", "127.0.0.1"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(sched_file):
        time.sleep(0.05)
    started = time.perf_counter()
    worker = subprocess.Popen([sys.executable, "-m", "hpcgpu.worker", "--scheduler-file", sched_file,
                               "--gpus-per-node", "all", "--multiprocessing-method", method,
                               "--protocol", "tcp", "--interface", "lo"],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "worker.err"), "w"))
    try:
        with Client(scheduler_file=sched_file, timeout=60) as client:
            client.wait_for_workers(gpus, timeout=120)
            connected = time.perf_counter() - started

            def on_gpu():
                import cupy
                x = cupy.arange(10_000_000, dtype="float64")
                return (os.environ.get("CUDA_VISIBLE_DEVICES"), cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                        float(x.sum()))

            seen = client.run(on_gpu)
        expect = float(sum(range(10_000_000)))
        return dict(method=method, workers=len(seen), connected_s=round(connected, 2),
                    devices=sorted(v[0] for v in seen.values()), names=sorted({v[1] for v in seen.values()}),
                    sums_ok=all(v[2] == expect for v in seen.values()))
    finally:
        worker.terminate(); worker.wait(60)
        scheduler.terminate(); scheduler.wait(60)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="forked-server,forkserver,spawn")
    args = parser.parse_args()
    import cupy
    gpus = cupy.cuda.runtime.getDeviceCount()
    for method in args.methods.split(","):
        try:
            print(json.dumps(check(method, gpus)), flush=True)
        except Exception as error:
            print(json.dumps(dict(method=method, error=f"{type(error).__name__}: {error}")), flush=True)
