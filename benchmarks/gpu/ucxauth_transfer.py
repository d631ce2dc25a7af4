"""One CuPy array moved between two workers on one GPU over tcp, ucx and ucx+auth, in one run.

Shows that ``ucx+auth`` carries CUDA frames like ``ucx`` (the exchange happens once per
connection, the data path is distributed-ucxx's) and what a new connection costs.

The scheduler and client live in this process, each worker behind a nanny in a process of
its own, both as a ``LocalGPUCluster`` has them: this process registers hpcgpu's schemes
(:mod:`hpcgpu.network.schemes`) and each worker loads hpcgpu's worker preload, which
registers them there, so ``ucx+auth`` works from a source tree on ``PYTHONPATH`` (no
package metadata, no entry point) as from an installed hpcgpu.

    python benchmarks/gpu/ucxauth_transfer.py [size_mib] [repeat]
"""

from __future__ import annotations

import os

os.environ.setdefault("DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT", "True")  # before dask reads its config

import asyncio  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from distributed import Client, Nanny, Scheduler  # noqa: E402
from distributed.comm import connect  # noqa: E402

from hpcgpu.network import schemes, ucxauth  # noqa: E402


def make(n: int):
    import cupy

    x = cupy.ones(n, dtype="u1")
    cupy.cuda.Device().synchronize()
    return x


def size_of(x) -> tuple[int, str]:
    return int(x.nbytes), type(x).__module__


async def _connects(address: str, n: int = 20) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        comm = await connect(address, timeout=30)
        times.append(time.perf_counter() - started)
        await comm.close()
    return statistics.median(times)


async def case(protocol: str, size: int, repeat: int) -> dict:
    async with Scheduler(protocol=protocol, interface="lo", dashboard_address=":0") as scheduler:
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        env = {"CUDA_VISIBLE_DEVICES": gpu, "HPCGPU_GPU": gpu}  # both workers on one GPU
        worker = dict(nthreads=1, env=env, preload=["hpcgpu.worker.preload"])  # as LocalGPUCluster's
        async with Nanny(scheduler.address, **worker) as a, Nanny(scheduler.address, **worker) as b, \
                Client(scheduler.address, asynchronous=True) as client:
            await client.wait_for_workers(2)
            times, kinds = [], set()
            for _ in range(repeat):
                x = client.submit(make, size, workers=[a.worker_address], pure=False)
                await x
                started = time.perf_counter()
                n, kind = await client.submit(size_of, x, workers=[b.worker_address], pure=False)
                times.append(time.perf_counter() - started)
                kinds.add(kind)
                del x
            return {"protocol": protocol, "address": scheduler.address, "bytes": n, "types": sorted(kinds),
                    "best_s": min(times), "median_s": statistics.median(times),
                    "GiB_per_s_best": n / min(times) / 2**30,
                    "connect_median_ms": 1e3 * await _connects(scheduler.address)}


def main() -> None:
    size = int(float(sys.argv[1]) * 2**20) if len(sys.argv) > 1 else 256 * 2**20
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    schemes.register()  # the scheduler and client of this process, as LocalGPUCluster does
    with ucxauth.temporary_key():
        for protocol in ("tcp", "ucx", "ucx+auth"):
            print(json.dumps(asyncio.run(case(protocol, size, repeat))), flush=True)


if __name__ == "__main__":
    main()
