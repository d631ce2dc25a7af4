"""Counter-based random blocks on the GPU: Philox4x32-10 in one CUDA kernel per block.

Element ``i`` of a block is a pure function of the block's 64-bit key and ``i``: the
kernel evaluates Philox4x32-10 (Salmon et al., SC'11) at counter ``(t, t >> 32, 0, 0)``
with ``t = i // per_counter``, key ``(key & 0xffffffff, key >> 32)``, and turns its four
32-bit words into ``per_counter`` values:

- float64 (2 per counter): ``u = ((w0 << 32 | w1) >> 11) * 2**-53`` and the same from
  ``(w2, w3)``; normals by Box-Muller from ``1 - u_a`` and ``u_b``
  (``sqrt(-2 log(1 - u_a)) * (cospi(2 u_b), sinpi(2 u_b))``);
- float32 (4 per counter): ``u = (w >> 8) * 2**-24`` per word, normals by Box-Muller on
  the pairs ``(w0, w1)`` and ``(w2, w3)``;
- integers (2 per counter): ``low + umulhi64(w0 << 32 | w1, high - low)`` (its bias is
  below ``(high - low) / 2**64``; the whole 64-bit range takes the word itself).

Why not cuRAND: re-keying a cuRAND host-API generator (``curandSetPseudoRandomGeneratorSeed``)
waits for the GPU, measured at 0.58 ms per 10000 x 10000 block on an H200 (the whole
generation), so a worker could not queue its next block while the GPU worked; creating a
generator per block costs more still. This kernel needs no state and no set-up: blocks
queue back to back.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["philox_block", "PER_COUNTER"]

_PHILOX = r"""
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

__device__ __forceinline__ void philox4x32_10(unsigned long long t, unsigned int k0, unsigned int k1,
                                              unsigned int& c0, unsigned int& c1,
                                              unsigned int& c2, unsigned int& c3) {
    c0 = (unsigned int)t; c1 = (unsigned int)(t >> 32); c2 = 0u; c3 = 0u;
    #pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
        unsigned int hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        unsigned int hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    }
}

__device__ __forceinline__ double unit53(unsigned int hi, unsigned int lo) {
    return (double)((((unsigned long long)hi << 32) | lo) >> 11) * 0x1.0p-53;
}

__device__ __forceinline__ float unit24(unsigned int w) {
    return (float)(w >> 8) * 0x1.0p-24f;
}

#define GRID_STRIDE(count) \
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; t < (count); \
         t += (unsigned long long)blockDim.x * gridDim.x)

extern "C" __global__ void normal_f64(double* out, unsigned long long n, unsigned int k0, unsigned int k1,
                                      double loc, double scale) {
    GRID_STRIDE((n + 1) / 2) {
        unsigned int c0, c1, c2, c3;
        philox4x32_10(t, k0, k1, c0, c1, c2, c3);
        double r = sqrt(-2.0 * log(1.0 - unit53(c0, c1))), s, c;
        sincospi(2.0 * unit53(c2, c3), &s, &c);
        unsigned long long i = 2 * t;
        out[i] = fma(scale, r * c, loc);
        if (i + 1 < n) out[i + 1] = fma(scale, r * s, loc);
    }
}

extern "C" __global__ void normal_f32(float* out, unsigned long long n, unsigned int k0, unsigned int k1,
                                      float loc, float scale) {
    GRID_STRIDE((n + 3) / 4) {
        unsigned int w[4];
        philox4x32_10(t, k0, k1, w[0], w[1], w[2], w[3]);
        float v[4];
        for (int p = 0; p < 2; ++p) {
            float r = sqrtf(-2.0f * logf(1.0f - unit24(w[2 * p]))), s, c;
            sincospif(2.0f * unit24(w[2 * p + 1]), &s, &c);
            v[2 * p] = fmaf(scale, r * c, loc);
            v[2 * p + 1] = fmaf(scale, r * s, loc);
        }
        for (int k = 0; k < 4; ++k) if (4 * t + k < n) out[4 * t + k] = v[k];
    }
}

extern "C" __global__ void uniform_f64(double* out, unsigned long long n, unsigned int k0, unsigned int k1,
                                       double low, double width) {
    GRID_STRIDE((n + 1) / 2) {
        unsigned int c0, c1, c2, c3;
        philox4x32_10(t, k0, k1, c0, c1, c2, c3);
        unsigned long long i = 2 * t;
        out[i] = fma(width, unit53(c0, c1), low);
        if (i + 1 < n) out[i + 1] = fma(width, unit53(c2, c3), low);
    }
}

extern "C" __global__ void uniform_f32(float* out, unsigned long long n, unsigned int k0, unsigned int k1,
                                       float low, float width) {
    GRID_STRIDE((n + 3) / 4) {
        unsigned int w[4];
        philox4x32_10(t, k0, k1, w[0], w[1], w[2], w[3]);
        for (int k = 0; k < 4; ++k) if (4 * t + k < n) out[4 * t + k] = fmaf(width, unit24(w[k]), low);
    }
}

extern "C" __global__ void integers(OUT_T* out, unsigned long long n, unsigned int k0, unsigned int k1,
                                    unsigned long long low, unsigned long long width) {
    GRID_STRIDE((n + 1) / 2) {
        unsigned int c0, c1, c2, c3;
        philox4x32_10(t, k0, k1, c0, c1, c2, c3);
        unsigned long long i = 2 * t;
        // low and width come modulo 2**64 (width 0: the whole 64-bit range); unsigned
        // arithmetic gives the right bits for any integer type
        unsigned long long a = ((unsigned long long)c0 << 32) | c1, b = ((unsigned long long)c2 << 32) | c3;
        out[i] = (OUT_T)(low + (width ? __umul64hi(a, width) : a));
        if (i + 1 < n) out[i + 1] = (OUT_T)(low + (width ? __umul64hi(b, width) : b));
    }
}
"""

#: values per Philox counter, by kernel
PER_COUNTER = {"normal_f64": 2, "normal_f32": 4, "uniform_f64": 2, "uniform_f32": 4, "integers": 2}

_C_TYPES = {"int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
            "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
            "uint64": "unsigned long long"}
_THREADS = 256


@functools.lru_cache(maxsize=None)
def _module(out_type: str, device: int):
    """The kernels for ``out_type`` on ``device`` (a module is loaded per device; CuPy's
    disk cache keeps the compiled code across processes)."""
    import cupy

    return cupy.RawModule(code=_PHILOX.replace("OUT_T", out_type), options=("--std=c++17",))


def philox_block(key: int, method: str, args: tuple, dtype, shape: tuple):
    """One block of ``method`` (``"normal"``, ``"uniform"`` or ``"integers"``) on the current
    device, queued on the current stream.

    ``args`` are ``(loc, scale)`` or ``(low, high)``; ``dtype`` is float32 or float64, or an
    integer type for integers (:mod:`hpcgpu.array.random` checks it); ``key`` is the
    block's 64-bit key (:func:`hpcgpu.array.seeds.block_seed`).

    Examples
    --------
    >>> block = philox_block(7, "normal", (10.0, 1.0), "float64", (1000, 1000))  # doctest: +SKIP
    >>> bool(abs(float(block.mean()) - 10) < 0.01)  # doctest: +SKIP
    True
    """
    import cupy

    dtype = np.dtype(dtype)
    out = cupy.empty(shape, dtype=dtype)
    if out.size == 0:
        return out
    if method == "integers":
        name, out_type = "integers", _C_TYPES[dtype.name]
        low, high = args
        scalars = (np.uint64(low % 2**64), np.uint64((high - low) % 2**64))
    else:
        name, out_type = f"{method}_f{dtype.itemsize * 8}", "int"
        first, second = args
        if method == "uniform":
            second = second - first  # (low, high) -> (low, width)
        scalars = (dtype.type(first), dtype.type(second))
    kernel = _module(out_type, cupy.cuda.runtime.getDevice()).get_function(name)
    counters = -(-out.size // PER_COUNTER[name])
    grid = min(-(-counters // _THREADS), 2**31 - 1)
    kernel((grid,), (_THREADS,), (out, np.uint64(out.size), np.uint32(key & 0xFFFFFFFF), np.uint32(key >> 32),
                                  *scalars))
    return out
