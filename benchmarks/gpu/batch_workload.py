"""GPU check of batch mode: one worker per GPU (verified by UUID) and the array-sum workload.

Run by benchmarks/gpu/batch_check.sh under ``hpcgpu run`` (direct, mpirun) and
``python -m hpcgpu.mpi``; writes ``$OUT/<mode>.json`` and prints one summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import dask
import dask.array as da

import hpcgpu


def device_facts() -> dict:
    """Inside a worker: what CuPy really runs on, named by NVML's UUID."""
    import cupy
    import pynvml

    pynvml.nvmlInit()
    pci = cupy.cuda.Device(0).pci_bus_id
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId(pci))
    return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "pci_bus_id": pci,
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "visible_device_count": cupy.cuda.runtime.getDeviceCount(), "pid": os.getpid()}


def smi_uuids() -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def array_sum(client, n: int, chunk: int, repeats: int) -> dict:
    """The array-sum reference workload (design.md) with CuPy chunks."""
    with dask.config.set({"array.backend": "cupy"}):
        x = da.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk))
    y = (x + 1)[::2, ::2].sum()
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = float(y.compute())
        times.append(time.perf_counter() - start)
    expected = 11.0 * (n // 2) ** 2
    return {"n": n, "chunk": chunk, "chunk_type": type(x._meta).__module__ + "." + type(x._meta).__name__,
            "seconds": times, "value": value, "expected_about": expected,
            "value_ok": abs(value - expected) / expected < 1e-3}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--n", type=int, default=40_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    ns = parser.parse_args()
    client = hpcgpu.get_client()
    registered = client.run_on_scheduler(
        lambda dask_scheduler: {ws.address: dict(ws.extra.get("hpcgpu", {}), name=ws.name)
                                for ws in dask_scheduler.workers.values()})
    facts = client.run(device_facts)
    uuids = [f["uuid"] for f in facts.values()]
    checks = {
        "worker_count": len(facts) == ns.expect,
        "distinct_uuids": len(set(uuids)) == len(uuids),
        "one_visible_gpu_each": all(f["visible_device_count"] == 1 for f in facts.values()),
        "preload_uuid_matches_cupy": all(registered[a].get("uuid") == f["uuid"] for a, f in facts.items()),
        "uuids_are_this_machines": set(uuids) <= set(smi_uuids()),
    }
    work = array_sum(client, ns.n, ns.chunk, ns.repeats)
    checks["array_sum_value"] = work["value_ok"]
    checks["cupy_chunks"] = work["chunk_type"].startswith("cupy")
    result = {"mode": ns.mode, "checks": checks, "workers": {a: {**registered[a], **facts[a]} for a in facts},
              "array_sum": work, "scheduler": client.scheduler.address,
              "python": sys.version.split()[0], "dask": dask.__version__}
    os.makedirs(ns.out, exist_ok=True)
    with open(os.path.join(ns.out, f"{ns.mode}.json"), "w") as handle:
        json.dump(result, handle, indent=1, default=str)
    print(f"{ns.mode}: {len(facts)} workers on {len(set(uuids))} distinct GPUs; array-sum "
          f"{ns.n}x{ns.n} chunks {ns.chunk}: {', '.join(f'{t:.2f}' for t in work['seconds'])} s; "
          f"checks {'all ok' if all(checks.values()) else checks}", flush=True)
    client.close()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
