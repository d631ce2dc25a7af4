"""Loop shapes of the array-sum's fused reduction kernel, timed side by side on one GPU.

Every variant computes ``sum((normal(10, 1, (c, c)) + 1)[::2, ::2])`` for each of ``blocks``
Dask blocks (Philox4x32-10 + Box-Muller per element, the values of hpcgpu.array.philox)
and writes one partial per CUDA block; CuPy sums the partials. They differ only in how the
elements are walked (flattened index or rows x columns, 64- or 32-bit arithmetic, one or
two elements per iteration) and in how many blocks one launch covers, so their times say
what the loop costs beside the arithmetic. Times are CUDA-event times, best of ``repeat``
after a warm-up launch.

    python benchmarks/gpu/kernel_variants.py --blocks 2500 --chunk 10000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # fused_limit

from fused_limit import BLOCK_SUM  # noqa: E402
from hpcgpu.array.fused.codegen import _PRELUDE  # noqa: E402
from hpcgpu.array.random import block_seed  # noqa: E402

_THREADS = 256

# one element: Philox + Box-Muller at linear index i of a c x c block, + 1
_ELEMENT = "(rand_normal_f64({i}, k0, k1, 10.0, 1.0) + 1.0)"

_KERNELS = {
    # rows x columns, 64-bit loops (benchmarks/fused_limit.py)
    "rows-64bit": r"""
extern "C" __global__ void k(const unsigned int* keys, long long chunk, long long parts, double* out) {
    long long b = blockIdx.x / parts, p = blockIdx.x % parts;
    unsigned int k0 = keys[2 * b], k1 = keys[2 * b + 1];
    double acc = 0.0;
    for (long long row = 2 * p; row < chunk; row += 2 * parts)
        for (long long col = 2 * threadIdx.x; col < chunk; col += 2 * blockDim.x)
            acc += ELEMENT(row * chunk + col);
    REDUCE
}""",
    # the flattened reduced index, unravelled per element, 32-bit (today's codegen, batched)
    "flat-32bit": r"""
extern "C" __global__ void k(const unsigned int* keys, int chunk, int parts, double* out) {
    int b = blockIdx.x / parts, p = blockIdx.x % parts;
    unsigned int k0 = keys[2 * b], k1 = keys[2 * b + 1];
    const int half = chunk / 2, reduced = half * half;
    double acc = 0.0;
    for (int r = p * 256 + threadIdx.x; r < reduced; r += parts * 256) {
        int i1 = r % half, i0 = r / half;
        acc += ELEMENT((unsigned int)(2 * i0 * chunk + 2 * i1));
    }
    REDUCE
}""",
    # rows x columns, 32-bit
    "rows-32bit": r"""
extern "C" __global__ void k(const unsigned int* keys, int chunk, int parts, double* out) {
    int b = blockIdx.x / parts, p = blockIdx.x % parts;
    unsigned int k0 = keys[2 * b], k1 = keys[2 * b + 1];
    double acc = 0.0;
    for (int row = 2 * p; row < chunk; row += 2 * parts)
        for (int col = 2 * threadIdx.x; col < chunk; col += 2 * 256)
            acc += ELEMENT((unsigned int)(row * chunk + col));
    REDUCE
}""",
    # rows x columns, 32-bit, two independent elements per iteration
    "rows-32bit-x2": r"""
extern "C" __global__ void k(const unsigned int* keys, int chunk, int parts, double* out) {
    int b = blockIdx.x / parts, p = blockIdx.x % parts;
    unsigned int k0 = keys[2 * b], k1 = keys[2 * b + 1];
    double acc = 0.0, acc2 = 0.0;
    for (int row = 2 * p; row < chunk; row += 2 * parts) {
        int col = 2 * threadIdx.x;
        for (; col + 2 * 256 < chunk; col += 4 * 256) {
            acc += ELEMENT((unsigned int)(row * chunk + col));
            acc2 += ELEMENT((unsigned int)(row * chunk + col + 2 * 256));
        }
        if (col < chunk) acc += ELEMENT((unsigned int)(row * chunk + col));
    }
    acc += acc2;
    REDUCE
}""",
}

def source(name: str) -> str:
    body = _KERNELS[name].replace("REDUCE", BLOCK_SUM)
    return _PRELUDE + "#define ELEMENT(i) " + _ELEMENT.format(i="(i)") + "\n" + body


def keys_of(blocks: int) -> np.ndarray:
    side = int(round(blocks ** 0.5))
    keys = [block_seed(0, (i, j)) for i in range(side) for j in range(blocks // side)]
    return np.array([[k & 0xFFFFFFFF, k >> 32] for k in keys], dtype=np.uint32).ravel()


def run(name: str, blocks: int, chunk: int, parts: int, fmad: bool, repeat: int) -> dict:
    import cupy

    options = ("--std=c++17",) + (() if fmad else ("--fmad=false",))
    kernel = cupy.RawKernel(source(name), "k", options=options)
    keys = cupy.asarray(keys_of(blocks))
    partials = cupy.empty(blocks * parts, dtype=cupy.float64)
    wide = name.endswith("64bit")
    args = (keys, np.int64(chunk) if wide else np.int32(chunk), np.int64(parts) if wide else np.int32(parts), partials)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times, value = [], None
    for i in range(repeat + 1):  # the first launch compiles and warms up: not counted
        start.record()
        kernel((blocks * parts,), (_THREADS,), args)
        stop.record()
        stop.synchronize()
        value = float(partials.sum())
        if i:
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return dict(variant=name, blocks=blocks, chunk=chunk, parts=parts, fmad=fmad, seconds=min(times),
                spread=max(times) - min(times), value=value, registers=kernel.num_regs)


def launch_cost(calls: int = 2000) -> dict:
    """Host seconds per launch: keys as a device array vs in a by-value struct parameter."""
    import cupy

    code = 'struct Keys { unsigned int w[512]; };\n' \
           'extern "C" __global__ void by_array(const unsigned int* keys, unsigned int* out) { out[0] = keys[511]; }\n' \
           'extern "C" __global__ void by_value(const Keys keys, unsigned int* out) { out[0] = keys.w[511]; }\n'
    module = cupy.RawModule(code=code)
    out = cupy.zeros(1, dtype=cupy.uint32)
    table = np.arange(512, dtype=np.uint32)
    struct = table.view(np.dtype({"names": ["w"], "formats": [(np.uint32, (512,))]}))[0]
    result = {}
    for name, make in (("array", lambda: (cupy.asarray(table), out)), ("struct", lambda: (struct, out))):
        kernel = module.get_function(f"by_{'array' if name == 'array' else 'value'}")
        kernel((1,), (1,), make())
        cupy.cuda.Device().synchronize()
        begin = time.perf_counter()
        for _ in range(calls):
            kernel((1,), (1,), make())
        result[name] = (time.perf_counter() - begin) / calls
        cupy.cuda.Device().synchronize()
        result[f"{name}_value"] = int(out.get()[0])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=2500)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    rows = []
    for name in _KERNELS:
        for parts in (32, 128, 512):
            rows.append(run(name, args.blocks, args.chunk, parts, False, args.repeat))
            print(json.dumps(rows[-1]), flush=True)
    rows.append(run("rows-32bit", args.blocks, args.chunk, 128, True, args.repeat))
    print(json.dumps(rows[-1]), flush=True)
    cost = launch_cost()
    print(json.dumps(cost), flush=True)
    with open(os.path.join(args.out, "kernel_variants.json"), "w") as handle:
        json.dump({"variants": rows, "launch_cost": cost}, handle, indent=1)
    print(f"{'variant':<16}{'parts':>6}{'fmad':>6}{'regs':>6}{'seconds':>10}")
    for row in rows:
        print(f"{row['variant']:<16}{row['parts']:>6}{str(row['fmad']):>6}{row['registers']:>6}{row['seconds']:>10.4f}")


if __name__ == "__main__":
    main()
