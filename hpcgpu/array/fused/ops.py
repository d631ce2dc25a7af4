"""What a fused kernel may compute and the C code of it (pure: no GPU needed).

The C types of NumPy's dtypes, the CUDA expression of each ufunc for the loop dtypes
NumPy resolves (:func:`check_loop` says which have one), exact literals, and the device
functions every kernel starts with: the Philox4x32-10 draws of :mod:`hpcgpu.array.philox`
and NumPy's rounding per step. :mod:`hpcgpu.array.fused.codegen` assembles kernels from them.
"""

from __future__ import annotations

import operator
import struct

import numpy as np

from hpcgpu.array.fused.nodes import Map, Node, Unsupported
from hpcgpu.array.philox import _PHILOX

__all__ = ["C_TYPES", "check_loop", "check_reduction", "combine_code", "cupy_ufunc", "identity", "literal",
           "ufunc_code"]

C_TYPES = {"float64": "double", "float32": "float", "int64": "long long", "int32": "int", "int16": "short",
           "int8": "signed char", "uint64": "unsigned long long", "uint32": "unsigned int",
           "uint16": "unsigned short", "uint8": "unsigned char", "bool": "bool"}
_ANY = {"add": "np_add({0}, {1})", "subtract": "np_sub({0}, {1})", "multiply": "np_mul({0}, {1})",
        "greater": "({0} > {1})", "greater_equal": "({0} >= {1})", "less": "({0} < {1})",
        "less_equal": "({0} <= {1})", "equal": "({0} == {1})", "not_equal": "({0} != {1})",
        "maximum": "np_max({0}, {1})", "minimum": "np_min({0}, {1})", "negative": "(-{0})",
        "positive": "(+{0})", "square": "np_square({0})", "where": "({0} ? {1} : {2})", "astype": "{0}",
        "logical_and": "({0} && {1})", "logical_or": "({0} || {1})", "logical_not": "(!{0})"}
_FLOAT = {"exp2": "pow(({t})2, {0})", "reciprocal": "(({t})1 / {0})",  # as CuPy writes them
          "divide": "({0} / {1})", "true_divide": "({0} / {1})", "power": "pow({0}, {1})", "absolute": "fabs({0})",
          "arctan2": "atan2({0}, {1})", "hypot": "hypot({0}, {1})", "isnan": "isnan({0})",
          "isinf": "isinf({0})", "isfinite": "isfinite({0})",
          **{name: f"{c}({{0}})" for name, c in [
              ("exp", "exp"), ("expm1", "expm1"), ("log", "log"), ("log2", "log2"),
              ("log10", "log10"), ("log1p", "log1p"), ("sqrt", "sqrt"), ("cbrt", "cbrt"), ("sin", "sin"),
              ("cos", "cos"), ("tan", "tan"), ("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"),
              ("sinh", "sinh"), ("cosh", "cosh"), ("tanh", "tanh"), ("floor", "floor"), ("ceil", "ceil"),
              ("trunc", "trunc"), ("rint", "rint")]}}
_INTEGER = {"bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})"}
_COMBINE = {"sum": "np_add({0}, {1})", "prod": "np_mul({0}, {1})", "min": "np_min({0}, {1})", "max": "np_max({0}, {1})"}
_PRELUDE = _PHILOX.split('extern "C"')[0] + r"""
template <class T> __device__ __forceinline__ T np_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T> __device__ __forceinline__ T np_min(T a, T b) { return (a < b || a != a) ? a : b; }
// Each step rounds as in CuPy's kernel per step, compiled with CuPy's options (contraction
// on, which shapes the math functions' own code). Products and sums carry a rounding mode,
// so that neither the compiler nor ptxas merges them with the next step into an fma; float
// constants are opaque to the compiler, as CuPy's scalar arguments are, so that no function
// is specialised for a constant.
template <class T> __device__ __forceinline__ T np_add(T a, T b) { return a + b; }
template <class T> __device__ __forceinline__ T np_sub(T a, T b) { return a - b; }
template <class T> __device__ __forceinline__ T np_mul(T a, T b) { return a * b; }
template <> __device__ __forceinline__ double np_add(double a, double b) { return __dadd_rn(a, b); }
template <> __device__ __forceinline__ double np_sub(double a, double b) { return __dsub_rn(a, b); }
template <> __device__ __forceinline__ double np_mul(double a, double b) { return __dmul_rn(a, b); }
template <> __device__ __forceinline__ float np_add(float a, float b) { return __fadd_rn(a, b); }
template <> __device__ __forceinline__ float np_sub(float a, float b) { return __fsub_rn(a, b); }
template <> __device__ __forceinline__ float np_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double np_opaque(double x) { double r; asm("mov.b64 %0, %1;" : "=d"(r) : "d"(x)); return r; }
__device__ __forceinline__ float np_opaque(float x) { float r; asm("mov.b32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
template <class T> __device__ __forceinline__ T np_square(T a) { return np_mul(a, a); }

// element i of a block of hpcgpu.array.philox's kernels (same counters, same arithmetic)
__device__ __forceinline__ double rand_normal_f64(unsigned long long i, unsigned int k0, unsigned int k1,
                                                  double loc, double scale) {
    unsigned int c0, c1, c2, c3;
    philox4x32_10(i >> 1, k0, k1, c0, c1, c2, c3);
    double r = sqrt(-2.0 * log(1.0 - unit53(c0, c1))), s, c;
    sincospi(2.0 * unit53(c2, c3), &s, &c);
    return fma(scale, r * ((i & 1) ? s : c), loc);
}
__device__ __forceinline__ float rand_normal_f32(unsigned long long i, unsigned int k0, unsigned int k1,
                                                 float loc, float scale) {
    unsigned int w[4];
    philox4x32_10(i >> 2, k0, k1, w[0], w[1], w[2], w[3]);
    int p = (int)((i >> 1) & 1);
    float r = sqrtf(-2.0f * logf(1.0f - unit24(w[2 * p]))), s, c;
    sincospif(2.0f * unit24(w[2 * p + 1]), &s, &c);
    return fmaf(scale, r * ((i & 1) ? s : c), loc);
}
__device__ __forceinline__ double rand_uniform_f64(unsigned long long i, unsigned int k0, unsigned int k1,
                                                   double low, double width) {
    unsigned int c0, c1, c2, c3;
    philox4x32_10(i >> 1, k0, k1, c0, c1, c2, c3);
    return fma(width, (i & 1) ? unit53(c2, c3) : unit53(c0, c1), low);
}
__device__ __forceinline__ float rand_uniform_f32(unsigned long long i, unsigned int k0, unsigned int k1,
                                                  float low, float width) {
    unsigned int w[4];
    philox4x32_10(i >> 2, k0, k1, w[0], w[1], w[2], w[3]);
    return fmaf(width, unit24(w[i & 3]), low);
}
template <class T> __device__ __forceinline__ T rand_integers(unsigned long long i, unsigned int k0,
        unsigned int k1, unsigned long long low, unsigned long long width) {
    unsigned int c0, c1, c2, c3;
    philox4x32_10(i >> 1, k0, k1, c0, c1, c2, c3);
    unsigned long long a = (i & 1) ? (((unsigned long long)c2 << 32) | c3) : (((unsigned long long)c0 << 32) | c1);
    return (T)(low + (width ? __umul64hi(a, width) : a));
}
"""


def check_loop(name: str, loop) -> None:
    """Unsupported unless ufunc ``name`` has CUDA code for the dtypes of ``loop``."""
    kinds = {np.dtype(d).kind for d in loop[:-1]} if name != "where" else {np.dtype(loop[1]).kind}
    if any(np.dtype(d).name not in C_TYPES for d in loop):
        raise Unsupported(f"{name} on {[np.dtype(d).name for d in loop]}")
    if name in _ANY and (name in ("where", "astype") or "b" not in kinds or name.startswith(("logical", "equal",
                                                                                              "not_equal"))):
        return
    if name in _FLOAT and kinds == {"f"} or name in _INTEGER and kinds <= {"i", "u", "b"}:
        return
    raise Unsupported(f"no fused code for {name} on {sorted(kinds)}")


def check_reduction(name: str, dtype) -> None:
    if np.dtype(dtype).name not in C_TYPES or np.dtype(dtype) == bool:
        raise Unsupported(f"{name} with a {np.dtype(dtype).name} result")


def literal(value, dtype) -> str:
    """``value`` as a C expression of ``dtype``, exactly (bits for floats).

    Examples
    --------
    >>> literal(1, np.float64), literal(-2, np.int8), literal(True, np.bool_)
    ('np_opaque(__longlong_as_double(0x3ff0000000000000LL))', '((signed char)0xfffffffffffffffeULL)', 'true')
    """
    dtype = np.dtype(dtype)
    value = dtype.type(value)
    if dtype.kind == "f":  # opaque: see np_opaque
        if dtype.itemsize == 8:
            return f"np_opaque(__longlong_as_double(0x{struct.unpack('<Q', value.tobytes())[0]:016x}LL))"
        return f"np_opaque(__int_as_float(0x{struct.unpack('<I', value.tobytes())[0]:08x}))"
    if dtype.kind == "b":
        return "true" if value else "false"
    return f"(({C_TYPES[dtype.name]})0x{int(value) % 2**64:x}ULL)"


def cupy_ufunc(node: Map) -> str:
    """The ufunc the kernel computes for ``node``: the one CuPy runs.

    ``cupy.ndarray.__pow__`` (CuPy 14) computes ``x ** 2`` as ``square``, ``x ** 0.5`` as
    ``sqrt`` and ``x ** -1.0`` as ``reciprocal`` when the exponent is a Python int or
    float; these differ from ``pow`` in the last bit. ``np.power(x, 2)``, ``2 ** x`` and
    NumPy scalar exponents run ``pow``.

    Examples
    --------
    >>> from hpcgpu.array.fused.nodes import ArrayLeaf
    >>> x = ArrayLeaf(np.ones(3))
    >>> [cupy_ufunc(Map(f, "power", (x, y), ("f8", "f8", "f8"), (3,)))
    ...  for f, y in [(operator.pow, 2), (operator.pow, 0.5), (operator.pow, -1.0),
    ...               (operator.pow, np.float64(2)), (np.power, 2), (operator.pow, 3)]]
    ['square', 'sqrt', 'reciprocal', 'power', 'power', 'power']
    """
    if node.name != "power" or node.fn is not operator.pow or not isinstance(node.args[0], Node):
        return node.name
    y = node.args[1]
    if type(y) is int and y == 2:
        return "square"
    if type(y) is float:
        return {2.0: "square", 0.5: "sqrt", -1.0: "reciprocal"}.get(y, node.name)
    return node.name


def ufunc_code(name: str, operands: list, ctype: str) -> str:
    """The C expression of ufunc ``name`` on ``operands`` with a ``ctype`` result."""
    return {**_ANY, **_FLOAT, **_INTEGER}[name].format(*operands, t=ctype)


def combine_code(name: str, a: str, b: str) -> str:
    """The C expression combining two partial results of reduction ``name``."""
    return _COMBINE[name].format(a, b)


def identity(name: str, dtype) -> str:
    """The C literal a reduction ``name`` of ``dtype`` starts from."""
    dtype = np.dtype(dtype)
    if name in ("sum", "prod"):
        return literal(0 if name == "sum" else 1, dtype)
    if dtype.kind == "f":
        return literal(np.inf if name == "min" else -np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.max if name == "min" else info.min, dtype)
