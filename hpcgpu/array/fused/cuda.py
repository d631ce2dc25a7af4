"""The CUDA backend of fused expressions: compile once per signature, launch per block.

The kernels come from :mod:`hpcgpu.array.fused.codegen`. Each is compiled once per
expression signature (:func:`signature`: the expression, shapes, strides, constants),
which is cheaper to compute per block than the source, and cached here (and on disk by
CuPy); a block only supplies its arguments (a random block's key, a block's data).
Compiled with CuPy's own options (:data:`OPTIONS`), so that a math function (``pow``,
``exp``, ...) gives CuPy's bits; the generated code keeps each step's rounding (see
:mod:`hpcgpu.array.fused.codegen`). A reduction's partials (one per thread block) are
reduced by CuPy.
"""

from __future__ import annotations

import numpy as np

from hpcgpu.array.fused.codegen import _THREADS, BATCH_KEY_WORDS, batch_kernel_source, kernel_source
from hpcgpu.array.fused.ops import check_loop, check_reduction, cupy_ufunc
from hpcgpu.array.fused.nodes import ArrayLeaf, Map, Node, RandomLeaf, Reduce, Slice, Unsupported

#: NVRTC options of the fused kernels: CuPy's defaults (contraction on), with C++17
OPTIONS = ("--std=c++17",)

__all__ = ["OPTIONS", "evaluate", "evaluate_batch", "signature", "kernel_source", "check_loop", "check_reduction"]


def signature(node: Node, leaves: list, seen: dict):
    """What the kernel source depends on, as nested tuples, and the leaves in the order
    the source takes their arguments (a cheaper cache key than the source itself)."""
    if id(node) in seen:
        return ("ref", seen[id(node)])
    if isinstance(node, (RandomLeaf, ArrayLeaf)):
        seen[id(node)] = len(leaves)
        leaves.append(node)
        if isinstance(node, RandomLeaf):
            return ("random", node.method, node.args, node.dtype.str, node.shape)
        return ("array", node.dtype.str, node.shape, node.value.strides)
    if isinstance(node, Map):
        args = tuple(signature(a, leaves, seen) if isinstance(a, Node) else (type(a), a) for a in node.args)
        return ("map", cupy_ufunc(node), tuple(d.str for d in node.loop), node.shape, args)
    if isinstance(node, Slice):
        return ("slice", tuple((r.start, r.step, len(r)) for r in node.ranges), signature(node.child, leaves, seen))
    if isinstance(node, Reduce):
        return ("reduce", node.name, node.axis, node.dtype.str, signature(node.child, leaves, seen))
    raise Unsupported(f"no fused code for {type(node).__name__}")


def _arguments(leaves: list) -> list:
    args: list = []
    for leaf in leaves:
        if isinstance(leaf, RandomLeaf):
            args += [np.uint32(leaf.key & 0xFFFFFFFF), np.uint32(leaf.key >> 32)]
        else:
            args.append(leaf.value)
    return args


_KERNELS: dict = {}


def _compiled(node: Node) -> tuple:
    """``(kernel, plan, arguments)`` for ``node``, the kernel built once per signature."""
    import cupy

    leaves: list = []
    key = signature(node, leaves, {})
    if key not in _KERNELS:
        source, _, plan = kernel_source(node)
        _KERNELS[key] = (cupy.RawKernel(source, "fused_kernel", options=OPTIONS), plan)
    kernel, plan = _KERNELS[key]
    return kernel, plan, _arguments(leaves)


def evaluate(node: Node):
    """The values of ``node`` on the current device, queued on the current stream."""
    import cupy

    if isinstance(node, ArrayLeaf):
        return node.value
    kernel, plan, args = _compiled(node)
    if not isinstance(node, Reduce):
        out = cupy.empty(node.shape, dtype=node.dtype)
        if plan["size"]:
            kernel((min(-(-plan["size"] // _THREADS), 65536),), (_THREADS,), (*args, out))
        return out
    partials = cupy.empty((plan["outputs"], plan["parts"]), dtype=node.dtype)
    kernel((plan["outputs"] * plan["parts"],), (_THREADS,), (*args, partials))
    return _combined(node, partials).reshape(node.shape)


def _combined(node: Reduce, partials):
    """The partials' last axis reduced as ``node`` reduces (one partial: itself)."""
    import cupy

    if partials.shape[-1] == 1:
        return partials[..., 0]
    combine = {"sum": cupy.sum, "prod": cupy.prod, "min": cupy.min, "max": cupy.max}[node.name]
    return combine(partials, axis=-1)


#: the kernel parameter that carries a batch's keys: BATCH_KEY_WORDS 32-bit words
_KEY_TABLE = np.dtype({"names": ["w"], "formats": [(np.uint32, (BATCH_KEY_WORDS,))]})


def evaluate_batch(node: Reduce, block_ids: list):
    """The values of ``node`` for each block of ``block_ids`` (its random leaves drawn from
    that block), stacked: launches of one kernel, each over up to ``plan["batch"]`` blocks
    whose keys travel by value in the launch's parameters (no host-to-device copy, which
    would wait for the GPU). ``node``'s leaves are random leaves alone.
    """
    import cupy

    from hpcgpu.array.seeds import block_seeds

    leaves: list = []
    key = ("batch", signature(node, leaves, {}))
    if key not in _KERNELS:
        source, plan = batch_kernel_source(node)
        _KERNELS[key] = (cupy.RawKernel(source, "fused_kernel", options=OPTIONS), plan)
    kernel, plan = _KERNELS[key]
    seeds = np.stack([block_seeds(leaf.seed, block_ids) for leaf in leaves], axis=1)  # (blocks, leaves)
    words = np.empty(seeds.shape + (2,), dtype=np.uint32)
    words[..., 0], words[..., 1] = seeds & np.uint64(0xFFFFFFFF), seeds >> np.uint64(32)
    words = words.reshape(len(block_ids), -1)
    per_block = plan["outputs"] * plan["parts"]
    partials = cupy.empty((len(block_ids), plan["outputs"], plan["parts"]), dtype=node.dtype)
    launches = -(-len(block_ids) // plan["batch"])
    bounds = np.linspace(0, len(block_ids), launches + 1).round().astype(int)  # even launches: no small last wave
    for start, stop in zip(bounds, bounds[1:]):
        table = np.zeros((), dtype=_KEY_TABLE)
        table["w"][:(stop - start) * words.shape[1]] = words[start:stop].ravel()
        kernel(((stop - start) * per_block,), (_THREADS,), (table, partials[start:stop]))
    return _combined(node, partials).reshape((len(block_ids),) + node.shape)
