"""The NumPy backend of fused expressions: the recorded calls, replayed on real blocks.

It computes each node with the callable the chain used, in the chain's order, so its
result is the unfused result bit for bit: the tests run it on the CPU to check what the
expressions capture (operands, their order, slices, axes, dtypes) against the chain.
"""

from __future__ import annotations

from hpcgpu.array.fused.nodes import ArrayLeaf, Map, Node, RandomLeaf, Reduce, Slice, leaves_of, with_keys

__all__ = ["evaluate", "evaluate_batch"]


def evaluate(node: Node, memo: dict | None = None):
    """The values of ``node`` (each shared node computed once).

    Examples
    --------
    >>> import numpy as np
    >>> from hpcgpu.array.fused.expr import LazyBlock
    >>> x = LazyBlock(ArrayLeaf(np.ones((2, 2))), "numpy")
    >>> evaluate((x + 1)[::2].node).tolist()
    [[2.0, 2.0]]
    """
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)][1]
    if isinstance(node, ArrayLeaf):
        value = node.value
    elif isinstance(node, RandomLeaf):
        from hpcgpu.array.seeds import draw_block as _block

        value = _block(node.backend, node.seed, node.method, node.args, node.dtype, node.shape, node.block_id)
    elif isinstance(node, Map):
        value = node.fn(*(evaluate(a, memo) if isinstance(a, Node) else a for a in node.args))
    elif isinstance(node, Slice):
        value = evaluate(node.child, memo)[node.index]
    elif isinstance(node, Reduce):
        value = node.fn(evaluate(node.child, memo), axis=node.axis, keepdims=node.keepdims, **node.kwargs)
    else:
        raise TypeError(f"not a fused-expression node: {node!r}")
    memo[id(node)] = (node, value)  # the node too: its id stays unique while it is alive
    return value


def evaluate_batch(node: Node, block_ids: list) -> list:
    """The values of ``node`` for each block of ``block_ids``: its random leaves drawn from
    that block (:func:`hpcgpu.array.fused.batch.run_alike_chains`), block by block.

    Examples
    --------
    >>> leaf = RandomLeaf("numpy", 3, "uniform", (0.0, 1.0), "float64", (2, 2), 0, (0, 0))
    >>> first, second = evaluate_batch(leaf, [(0, 0), (1, 0)])
    >>> bool((first == evaluate(leaf)).all()), bool((first != second).any())
    (True, True)
    """
    from hpcgpu.array.seeds import block_seeds

    leaves = leaves_of(node)
    keys = [block_seeds(leaf.seed, block_ids) for leaf in leaves]
    return [evaluate(with_keys(node, {id(leaf): (int(k[i]), block_id) for leaf, k in zip(leaves, keys)}))
            for i, block_id in enumerate(block_ids)]
