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

import numpy as np

from hpcgpu.array.fused.nodes import ArrayLeaf, Map, Node, RandomLeaf, Reduce, Slice, Unsupported
from hpcgpu.array.fused.ops import _PRELUDE, C_TYPES, combine_code, cupy_ufunc, identity, literal, ufunc_code

__all__ = ["kernel_source", "batch_kernel_source", "BATCH_KEY_WORDS"]

_THREADS = 256


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
        code = ufunc_code(name, operands, C_TYPES[node.dtype.name])
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
    acc = C_TYPES[node.dtype.name]
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
    {acc} acc = {identity(node.name, node.dtype)};
    {head}
        {acc} v = ({acc}){value};
        acc = {combine_code(node.name, "acc", "v")};
    {tail}
    __shared__ {acc} buf[{_THREADS}];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = {_THREADS // 2}; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] = {combine_code(node.name, "buf[threadIdx.x]", "buf[threadIdx.x + s]")};
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

