"""``client.run`` on one GPU: hpcgpu's LocalGPUCluster beside dask-cuda's LocalCUDACluster.

Per row, a fresh cluster per round (``--rounds``): the RAPIDS notebook's first step
``client.run(cupy.cuda.set_allocator, rmm.allocators.cupy.rmm_cupy_allocator)`` timed as
the first call, again as the second, then the median of ``--calls`` no-op calls
(``client.run(abs, 1)``). Rows: dask-cuda over TCP (its default) and TLS, hpcgpu over TLS
(its default) and TCP, with the same ECDSA certificate for TLS. Prints ms::

    python benchmarks/gpu/run_cost_gpu.py --rounds 4 --calls 150

Needs CuPy, RMM and dask-cuda (benchmarks/gpu/run_published.sh installs them from .whl/).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings


def _cluster(row: str, security):
    from dask_cuda import LocalCUDACluster

    from hpcgpu import LocalGPUCluster

    options = dict(CUDA_VISIBLE_DEVICES="0", dashboard_address=None)
    tls = row.endswith("tls")
    if row.startswith("dask-cuda"):
        return LocalCUDACluster(**options, **(dict(protocol="tls", security=security) if tls else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # security=False's warning
        return LocalGPUCluster(**options, security=security if tls else False)


def _ms(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def one(row: str, security, calls: int) -> tuple[float, float, float]:
    """(first allocator call, second, median no-op) in ms on a fresh cluster."""
    import cupy
    import rmm.allocators.cupy
    from distributed import Client

    with _cluster(row, security) as cluster, Client(cluster, security=security if row.endswith("tls") else None) as client:
        step = lambda: client.run(cupy.cuda.set_allocator, rmm.allocators.cupy.rmm_cupy_allocator)  # noqa: E731
        first, second = _ms(step), _ms(step)
        return first, second, statistics.median(_ms(lambda: client.run(abs, 1)) for _ in range(calls))


def main(argv=None) -> None:
    from hpcgpu.network.tls import temporary_security

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=150)
    args = parser.parse_args(argv)
    security = temporary_security()
    rows = ("dask-cuda tcp", "hpcgpu tls", "dask-cuda tls", "hpcgpu tcp")
    samples: dict = {row: [] for row in rows}
    for _ in range(args.rounds):
        for row in rows:
            samples[row].append(one(row, security, args.calls))
    for row, runs in samples.items():
        print(f"{row:14s} first {[round(r[0], 1) for r in runs]} second {statistics.median(r[1] for r in runs):.2f}"
              f" no-op {statistics.median(r[2] for r in runs):.2f} ms")


if __name__ == "__main__":
    main()
