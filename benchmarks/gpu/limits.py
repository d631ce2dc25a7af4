"""Physical limits of one GPU host, measured with CuPy alone.

Prints one JSON line per figure: cuBLAS DGEMM per GPU, an HBM copy, and
NCCL's all-to-all among all the host's GPUs (one process, one communicator
per device), so that the collective plane's figures have a floor beside them.

Run: ``python benchmarks/gpu/limits.py [--sizes-mib 16,128]``
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def _best(fn, repeat=5):
    import cupy
    fn()
    cupy.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        cupy.cuda.runtime.deviceSynchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


def dgemm(n: int) -> dict:
    import cupy
    a = cupy.random.random((n, n))
    b = cupy.random.random((n, n))
    t = _best(lambda: a @ b, 3)
    return {"figure": "dgemm", "n": n, "seconds": t, "tflops": 2 * n**3 / t / 1e12}


def hbm_copy(nbytes: int) -> dict:
    import cupy
    a = cupy.empty(nbytes // 8)
    b = cupy.empty_like(a)
    t = _best(lambda: b.__setitem__(Ellipsis, a))
    return {"figure": "hbm-copy", "bytes": nbytes, "seconds": t, "GBps": 2 * nbytes / t / 1e9}


def alltoall(per_peer: int) -> dict:
    import cupy
    from cupy.cuda import nccl
    n = cupy.cuda.runtime.getDeviceCount()
    comms = nccl.NcclCommunicator.initAll(list(range(n)))
    bufs = []
    for d in range(n):
        with cupy.cuda.Device(d):
            bufs.append((cupy.ones(per_peer * n // 8), cupy.empty(per_peer * n // 8)))

    def run():
        nccl.groupStart()
        for d, comm in enumerate(comms):
            with cupy.cuda.Device(d):
                s, r = bufs[d]
                stream = cupy.cuda.get_current_stream().ptr
                step = per_peer // 8
                for p in range(n):
                    comm.send(s.data.ptr + p * per_peer, step, nccl.NCCL_FLOAT64, p, stream)
                    comm.recv(r.data.ptr + p * per_peer, step, nccl.NCCL_FLOAT64, p, stream)
        nccl.groupEnd()
        for d in range(n):
            with cupy.cuda.Device(d):
                cupy.cuda.get_current_stream().synchronize()

    t = _best(run)
    moved = per_peer * (n - 1)
    return {"figure": "nccl-alltoall", "gpus": n, "bytes_per_peer": per_peer,
            "seconds": t, "algbw_GBps": per_peer * n / t / 1e9,
            "busbw_GBps": moved / t / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mib", default="16,128,512")
    parser.add_argument("--gemm", default="20000,40000")
    args = parser.parse_args()
    import cupy
    from cupy.cuda import nccl
    print(json.dumps({"figure": "versions", "cupy": cupy.__version__,
                      "nccl": nccl.get_version(), "gpus": cupy.cuda.runtime.getDeviceCount(),
                      "nccl_api": sorted(a for a in dir(nccl.NcclCommunicator) if not a.startswith("_")),
                      "nccl_module": sorted(a for a in dir(nccl) if not a.startswith("_"))}))
    for n in map(int, args.gemm.split(",")):
        print(json.dumps(dgemm(n)), flush=True)
    print(json.dumps(hbm_copy(2 << 30)), flush=True)
    for mib in map(int, args.sizes_mib.split(",")):
        print(json.dumps(alltoall(mib << 20)), flush=True)


if __name__ == "__main__":
    main()
