"""One setting of hpcgpu's GPU worker at a time (CPU affinity, spilling, RMM pool) beside
dask-cuda's LocalCUDACluster, on the 2 TB array-sum graph: four runs each, one GPU.

    OUT=some/dir python benchmarks/gpu/worker_gap.py      # on a GPU machine, from the repository root
"""

import json
import os
import sys
import time

from distributed import Client

sys.path.insert(0, os.getcwd())
import hpcgpu.array as ha  # noqa: E402
from hpcgpu import LocalGPUCluster  # noqa: E402

VARIANTS = {
    "hpcgpu default": {},
    "hpcgpu cpu_affinity=False": {"cpu_affinity": False},
    "hpcgpu device_memory_limit=none": {"device_memory_limit": "none"},
    "hpcgpu rmm none, no spilling, no affinity": {"rmm_pool_size": "none", "device_memory_limit": "none",
                                                  "cpu_affinity": False},
}


def graph(n: int = 500_000):
    x = ha.random.normal(10, 1, size=(n, n), chunks=(10_000, 10_000), seed=0, backend="cupy")
    return (x + 1)[::2, ::2].sum()


def runs(client, label: str, out: dict) -> None:
    client.compute(graph(50_000)).result()  # warm
    times = []
    for _ in range(4):
        start = time.perf_counter()
        client.compute(graph()).result()
        times.append(time.perf_counter() - start)
    out[label] = times
    print(f"{label}: {' '.join(f'{t:.3f}' for t in times)}", flush=True)


def main() -> None:
    from dask_cuda import LocalCUDACluster

    out: dict = {}
    for label, options in VARIANTS.items():
        with LocalGPUCluster(n_workers=1, gpus=["0"], dashboard_address=None, silence_logs=40, **options) as cluster, \
                Client(cluster) as client:
            runs(client, label, out)
    with LocalCUDACluster(CUDA_VISIBLE_DEVICES=["0"], threads_per_worker=1, dashboard_address=None,
                          silence_logs=40) as cluster, Client(cluster) as client:
        runs(client, "dask-cuda LocalCUDACluster", out)
    with open(os.path.join(os.environ.get("OUT", "."), "worker_gap.json"), "w") as handle:
        json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
