"""The 2019 blog's code with one import changed, beside hpcgpu's own API, on one GPU.

    python benchmarks/gpu/blog_idiom.py [n] [chunk] [repeats]

``rs = da.random.RandomState(RandomState=cupy.random.RandomState)`` and
``rs.normal(10, 1, size=(n, n), chunks=(chunk, chunk))``, then ``(x + 1)[::2, ::2].sum()``,
with ``import hpcgpu.array as da``; beside ``ha.random.normal(10, 1, ...)`` of the same
size. One LocalGPUCluster, repeats interleaved; prints the medians and their ratio as JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(n: int = 200_000, chunk: int = 10_000, repeats: int = 5) -> dict:
    import cupy
    from distributed import Client

    import hpcgpu.array as da
    from hpcgpu import LocalGPUCluster

    def idiom(seed):
        rs = da.random.RandomState(seed, RandomState=cupy.random.RandomState)
        return rs.normal(10, 1, size=(n, n), chunks=(chunk, chunk))

    def own(seed):
        return da.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=seed)

    times: dict[str, list[float]] = {"idiom": [], "own": []}
    with LocalGPUCluster() as cluster, Client(cluster) as client:
        for make in (idiom, own):  # warm-up: kernels compiled, pools made
            client.compute((make(0) + 1)[::2, ::2].sum()).result()
        for i in range(repeats):
            for name, make in (("idiom", idiom), ("own", own)) if i % 2 == 0 else (("own", own), ("idiom", idiom)):
                start = time.perf_counter()
                total = float(client.compute((make(i + 1) + 1)[::2, ::2].sum()).result())
                times[name].append(time.perf_counter() - start)
                assert abs(total / (n // 2) ** 2 - 11) < 0.01, total  # the mean of normal(10, 1) + 1
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"n": n, "chunk": chunk, "repeats": repeats, "seconds": times, "median": medians,
            "ratio_idiom_to_own": medians["idiom"] / medians["own"]}


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:])), indent=1))
