"""CUDA source for fused expressions (pure functions: no GPU needed to generate it).

A fused expression (:mod:`hpcgpu.array.fused.expr`) becomes one CUDA kernel that
computes each element where it is used: a random leaf by Philox4x32-10 at the element's
counter (the same device code and mapping as :mod:`hpcgpu.array.philox`, so the values
are the same), an array leaf by one read through its strides, slices as index
arithmetic, elementwise steps in the loop dtypes NumPy resolves. A final reduction
accumulates in registers, then in shared memory, and writes one partial per thread
block. The source depends on the expression, its shapes, strides and constants, never
on a block's key or data (kernel arguments). :mod:`hpcgpu.array.fused.cuda` compiles
and launches it.
"""


from __future__ import annotations

import operator
import struct

import numpy as np

from hpcgpu.array.fused.nodes import ArrayLeaf, Map, Node, RandomLeaf, Reduce, Slice, Unsupported
from hpcgpu.array.philox import _PHILOX

__all__ = ["kernel_source", "batch_kernel_source", "check_loop", "check_reduction", "literal", "C_TYPES",
           "BATCH_KEY_WORDS", "cupy_ufunc"]

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
_THREADS = 256

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


class _Emitter:
    """C expressions for nodes at given indices; collects the kernel's parameters.

    ``narrow``: every extent and element count of the expression fits 31 bits, so index
    arithmetic runs on 32-bit integers (a 64-bit multiply is several instructions). With
    ``batch``, random leaves take their keys from the kernel's key table, one row per
    block (:func:`batch_kernel_source`); blocks in memory have no batched form.
    """

    def __init__(self, narrow: bool = False, batch: int = 0):
        self.params, self.args, self.seen = [], [], {}
        self.narrow, self.batch, self.randoms = narrow, batch, []

    def leaf_param(self, node) -> str:
        if id(node) not in self.seen:
            n = len(self.seen)
            self.seen[id(node)] = n
            if isinstance(node, RandomLeaf) and self.batch:
                self.randoms.append(n)
            elif isinstance(node, RandomLeaf):
                self.params.append(f"unsigned int k0_{n}, unsigned int k1_{n}")
                self.args += [np.uint32(node.key & 0xFFFFFFFF), np.uint32(node.key >> 32)]
            elif self.batch:
                raise Unsupported("a block in memory in a batched kernel")
            else:
                self.params.append(f"const {C_TYPES[node.dtype.name]}* __restrict__ a{n}")
                self.args.append(node.value)
        return str(self.seen[id(node)])

    def key_loads(self, block: str) -> str:
        """C statements that read each random leaf's key for block ``block`` of the table."""
        row = 2 * len(self.randoms)
        return "\n    ".join(f"const unsigned int k0_{n} = keys.w[{row} * {block} + {2 * i}], "
                               f"k1_{n} = keys.w[{row} * {block} + {2 * i + 1}];"
                               for i, n in enumerate(self.randoms))

    def emit(self, node, idx: list) -> str:
        if isinstance(node, Slice):
            suffix = "" if self.narrow else "LL"
            return self.emit(node.child, [f"({s.start}{suffix} + ({s.step}{suffix}) * {i})"
                                          for s, i in zip(node.ranges, idx)])
        if isinstance(node, Map):
            return self._map(node, idx)
        if isinstance(node, RandomLeaf):
            return self._random(node, idx)
        if isinstance(node, ArrayLeaf):
            n = self.leaf_param(node)
            item = node.value.itemsize
            offset = " + ".join(f"(long long){i} * {s // item}LL" for i, s, d in
                                zip(idx, node.value.strides, node.shape) if d != 1) or "0"
            return f"a{n}[{offset}]"
        raise Unsupported(f"no fused code for {type(node).__name__} inside an expression")

    def _map(self, node: Map, idx: list) -> str:
        name, args = cupy_ufunc(node), node.args
        if name != node.name:
            args = args[:1]
        operands = []
        for arg, dtype in zip(args, node.loop):
            if isinstance(arg, Node):
                skip = len(idx) - len(arg.shape)
                sub = [("0" if self.narrow else "0LL") if n == 1 else idx[skip + d] for d, n in enumerate(arg.shape)]
                operands.append(f"(({C_TYPES[dtype.name]}){self.emit(arg, sub)})")
            else:
                operands.append(literal(arg, dtype))
        code = {**_ANY, **_FLOAT, **_INTEGER}[name].format(*operands, t=C_TYPES[node.dtype.name])
        return f"(({C_TYPES[node.dtype.name]}){code})"

    def _random(self, node: RandomLeaf, idx: list) -> str:
        n = self.leaf_param(node)
        strides = np.cumprod((1,) + node.shape[:0:-1])[::-1]
        if self.narrow:  # below 2**31: the compiler knows the counter's high word is 0
            terms = " + ".join(f"(unsigned int){i} * {s}u" for i, s in zip(idx, strides)) or "0u"
            linear = f"(unsigned long long)(unsigned int)({terms})"
        else:
            linear = " + ".join(f"{i} * {s}ULL" for i, s in zip(idx, strides)) or "0ULL"
        first, second = node.args
        if node.method == "integers":
            low, width = first % 2**64, (second - first) % 2**64
            return (f"rand_integers<{C_TYPES[node.dtype.name]}>({linear}, k0_{n}, k1_{n}, {low}ULL, {width}ULL)")
        if node.method == "uniform":
            second = second - first
        bits = node.dtype.itemsize * 8
        return (f"rand_{node.method}_f{bits}({linear}, k0_{n}, k1_{n}, {literal(first, node.dtype)}, "
                f"{literal(second, node.dtype)})")


def _largest(node: Node) -> int:
    """The largest element count of any node of the expression."""
    size = int(np.prod(node.shape, dtype=np.int64))
    if isinstance(node, Map):
        return max([size] + [_largest(a) for a in node.args if isinstance(a, Node)])
    if isinstance(node, (Slice, Reduce)):
        return max(size, _largest(node.child))
    return size


def _unravel(var: str, dims: list, names: list, index: str) -> str:
    """C statements that split index ``var`` over ``dims`` (row-major) into ``names``
    (``index`` the C type: 32-bit division by a constant is a multiply and a shift)."""
    lines = [f"{index} rest_{var} = {var};"]
    for name, n in reversed(list(zip(names, dims))):
        lines.append(f"{index} {name} = rest_{var} % {n}; rest_{var} /= {n};")
    return "\n        ".join(lines)


def _parts(total: int, outputs: int) -> int:
    """Thread blocks per output of a reduction: enough to fill the GPU, 16+ elements a thread."""
    return max(1, min(-(-total // (_THREADS * 16)), 2048 // max(outputs, 1)))


def kernel_source(node: Node) -> tuple[str, list, dict]:
    """``(source, arguments, plan)`` of the kernel computing ``node``.

    Examples
    --------
    >>> from hpcgpu.array.fused.expr import LazyBlock
    >>> x = LazyBlock(ArrayLeaf(np.ones((4, 6))), "cupy")
    >>> y = np.sum((x + 1)[::2, ::3], axis=(0, 1), keepdims=True)
    >>> source, args, plan = kernel_source(y.node)
    >>> plan["outputs"], plan["reduced"], "a0[(long long)(0 + (2) * i0) * 6LL + (long long)(0 + (3) * i1) * 1LL]" in source
    (1, 4, True)
    """
    emitter = _Emitter(narrow=_largest(node) < 2**31)
    body, plan = (_reduce_body if isinstance(node, Reduce) else _map_body)(node, emitter)
    return _PRELUDE + body, emitter.args, plan


#: blocks per launch of a batched kernel: their keys fill at most 2 KB of the 4 KB of
#: kernel parameters, whatever the number of random leaves
BATCH_KEY_WORDS = 512


def batch_kernel_source(node: Reduce) -> tuple[str, dict]:
    """``(source, plan)`` of the kernel that computes ``node`` for ``plan["batch"]``
    blocks at once, their random leaves' keys in the by-value table ``keys``
    (``plan["leaves"]`` keys of two words per block, in the order leaves are first
    reached) and their partials one after the other in ``out``.

    Examples
    --------
    >>> from hpcgpu.array.fused.expr import LazyBlock
    >>> r = LazyBlock(RandomLeaf("cupy", 0, "normal", (0.0, 1.0), "float64", (8, 8), 5, (0, 0)), "cupy")
    >>> source, plan = batch_kernel_source(np.sum(r * r, axis=(0, 1), keepdims=True).node)
    >>> plan["batch"], plan["leaves"], "const unsigned int k0_0 = keys.w[2 * b + 0]" in source
    (256, 1, True)
    """
    emitter = _Emitter(narrow=_largest(node) < 2**31, batch=1)
    emitter.emit(node.child, [f"i{d}" for d in range(len(node.child.shape))])  # numbers the leaves
    leaves = len(emitter.randoms)
    batch = BATCH_KEY_WORDS // (2 * max(leaves, 1))
    emitter = _Emitter(narrow=emitter.narrow, batch=batch)
    body, plan = _reduce_body(node, emitter)
    table = f"struct KeyTable {{ unsigned int w[{max(2 * leaves * batch, 1)}]; }};\n"
    return _PRELUDE + table + body, {**plan, "batch": batch, "leaves": leaves}


#: thread blocks a reduction kernel aims at per launch: 25+ waves on an H200 (132 SMs x 8), so the
#: last, partial wave costs little
_GRID = 32768
#: rows (thread blocks' worth of work) below which the flattened loop fills the GPU better
_MIN_ROWS = 1024


def _loop(node: Reduce, names: list, blocks: int) -> tuple[str, str, int, str]:
    """``(loop head, loop tail, parts, index type)``: how a thread block walks its share of
    the reduced elements. Rows by thread blocks and the last reduced axis across the
    threads when that axis fills the threads and there are rows enough (indices advance by
    additions); else the flattened reduced index, split into coordinates per element.
    Indices are 32-bit where every value they take fits."""
    shape, axes = node.child.shape, list(node.axis)
    outputs = int(np.prod([n for d, n in enumerate(shape) if d not in axes], dtype=np.int64))
    inner, outer = axes[-1], axes[:-1]
    rows = int(np.prod([shape[d] for d in outer], dtype=np.int64))
    reduced = rows * shape[inner]
    by_rows = shape[inner] >= _THREADS and rows * outputs * blocks >= _MIN_ROWS
    if by_rows:
        parts = max(1, min(rows, -(-_GRID // (blocks * outputs))))
    else:
        parts = _parts(reduced, outputs) if blocks == 1 else max(1, min(_parts(reduced, outputs), -(-_GRID // (
            blocks * outputs))))
    index = "int" if max(reduced + parts * _THREADS, outputs * parts) < 2**31 else "long long"
    if by_rows:
        head = (f"for ({index} o = p; o < {rows}; o += parts) {{\n"
                f"        {_unravel('o', [shape[d] for d in outer], [names[d] for d in outer], index)}\n"
                f"        for ({index} {names[inner]} = threadIdx.x; {names[inner]} < {shape[inner]}; "
                f"{names[inner]} += {_THREADS}) {{")
        return head, "}\n    }", parts, index
    head = (f"for ({index} r = p * {_THREADS} + threadIdx.x; r < {reduced}; r += parts * {_THREADS}) {{\n"
            f"        {_unravel('r', [shape[d] for d in axes], [names[d] for d in axes], index)}")
    return head, "}", parts, index


def _reduce_body(node: Reduce, emitter: _Emitter) -> tuple[str, dict]:
    child = node.child
    kept = [d for d in range(len(child.shape)) if d not in node.axis]
    names = [f"i{d}" for d in range(len(child.shape))]
    outputs = int(np.prod([child.shape[d] for d in kept], dtype=np.int64))
    reduced = int(np.prod([child.shape[d] for d in node.axis], dtype=np.int64))
    acc, combine = C_TYPES[node.dtype.name], _COMBINE[node.name]
    head, tail, parts, index = _loop(node, names, max(emitter.batch, 1))
    value = emitter.emit(child, names)  # before the parameter list: emitting collects it
    if emitter.batch:  # one launch, many blocks: block b's partials follow block b - 1's
        params = ["const KeyTable keys", f"{acc}* out"]
        where = (f"const unsigned int b = blockIdx.x / {outputs * parts}u, g = blockIdx.x % {outputs * parts}u;\n"
                 f"    {emitter.key_loads('b')}\n    {index} m = g / parts, p = g % parts;")
    else:
        params = emitter.params + [f"{acc}* out"]
        where = f"{index} m = blockIdx.x / parts, p = blockIdx.x % parts;"
    body = f"""
extern "C" __global__ void fused_kernel({", ".join(params)}) {{
    const {index} parts = {parts};
    {where}
    {_unravel("m", [child.shape[d] for d in kept], [names[d] for d in kept], index) if kept else ""}
    {acc} acc = {_identity(node.name, node.dtype)};
    {head}
        {acc} v = ({acc}){value};
        acc = {combine.format("acc", "v")};
    {tail}
    __shared__ {acc} buf[{_THREADS}];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = {_THREADS // 2}; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] = {combine.format("buf[threadIdx.x]", "buf[threadIdx.x + s]")};
        __syncthreads();
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}}
"""
    return body, {"outputs": outputs, "parts": parts, "reduced": reduced}


def _map_body(node: Node, emitter: _Emitter) -> tuple[str, dict]:
    names = [f"i{d}" for d in range(len(node.shape))]
    out = C_TYPES[node.dtype.name]
    size = int(np.prod(node.shape, dtype=np.int64))
    index = "int" if emitter.narrow else "long long"
    value = emitter.emit(node, names)  # before the parameter list: emitting collects it
    body = f"""
extern "C" __global__ void fused_kernel({", ".join(emitter.params + [f"{out}* out"])}) {{
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < {size}LL;
         t += (long long)blockDim.x * gridDim.x) {{
        {_unravel("t", list(node.shape), names, index)}
        out[t] = ({out}){value};
    }}
}}
"""
    return body, {"size": size}


def _identity(name: str, dtype) -> str:
    dtype = np.dtype(dtype)
    if name in ("sum", "prod"):
        return literal(0 if name == "sum" else 1, dtype)
    if dtype.kind == "f":
        return literal(np.inf if name == "min" else -np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.max if name == "min" else info.min, dtype)
