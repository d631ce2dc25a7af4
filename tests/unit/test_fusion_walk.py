"""The one-walk tree search of hpcgpu's fusion pass finds the same trees, in the same
order, as the walk it replaced (kept here as the reference): per key, its leaf count from
a dependents list, then a post-order walk under each root."""

from __future__ import annotations

import random

import dask
import dask.local
import numpy as np
from dask._task_spec import Task
from hypothesis import given, settings
from hypothesis import strategies as st

import hpcgpu.array as ha
from hpcgpu.array.graphtrees import exclusive_trees
from hpcgpu.array.lazy_blocks import lazy_graph, materialize_remaining


def _reference(dsk, keys, width):
    dependents = {k: [] for k in dsk}
    for k, node in dsk.items():
        for d in node.dependencies:
            if d in dependents:
                dependents[d].append(k)
    seen, ordered = set(), True
    for k, node in dsk.items():
        ordered = ordered and all(d in seen or d not in dsk for d in node.dependencies)
        seen.add(k)
    deps = {k: v.dependencies & dsk.keys() for k, v in dsk.items()}
    order = dsk if ordered else dask.core.toposort(dsk, dependencies=deps)
    counts = {}
    for k in order:
        deps = dsk[k].dependencies
        total = 0 if deps else 1
        for d in deps:
            if not counts.get(d) or d in keys or len(dependents[d]) != 1:
                total = 0
                break
            total += counts[d]
        counts[k] = total if total <= width else 0
    trees = []
    for k, count in counts.items():
        if count < 2 or (k not in keys and any(counts.get(p) for p in dependents[k])):
            continue
        tree, stack = [], [(k, False)]
        while stack:
            key, expanded = stack.pop()
            if expanded:
                tree.append(key)
            else:
                stack.append((key, True))
                stack.extend((d, False) for d in dsk[key].dependencies)
        trees.append((k, tree))
    return trees


def _array_sum_graph(blocks: int):
    x = ha.random.normal(10, 1, size=(2 * blocks,) * 2, chunks=(2, 2), seed=0, backend="cpu")
    y = (x + 1)[::2, ::2].sum()
    hlg = dask.blockwise.optimize_blockwise(y.__dask_graph__(), keys=list(dask.core.flatten(y.__dask_keys__())))
    return lazy_graph(hlg.cull(set(dask.core.flatten(y.__dask_keys__())))), set(dask.core.flatten(y.__dask_keys__()))


def test_array_sum_trees_as_before():
    dsk, keys = _array_sum_graph(20)
    for width in (2, 4, 16, 25, 400):
        assert exclusive_trees(dsk, keys, width) == _reference(dsk, keys, width)
    assert len(exclusive_trees(dsk, keys, 16)) == 25  # 400 blocks, 16 per tree: the test can see a change


@st.composite
def graphs(draw):
    """A random DAG of Tasks (each key depending on 0-3 earlier keys), in a shuffled order."""
    n = draw(st.integers(1, 40))
    deps = [draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else [] for i in range(n)]
    tasks = {f"k{i}": Task(f"k{i}", _f, *(dask._task_spec.TaskRef(f"k{d}") for d in ds)) for i, ds in enumerate(deps)}
    names = list(tasks)
    if draw(st.booleans()):
        random.Random(draw(st.integers(0, 99))).shuffle(names)
    outputs = set(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)))
    return {k: tasks[k] for k in names}, outputs, draw(st.integers(2, 8))


def _f(*args):
    return sum(args)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(graphs())
def test_random_graph_trees_as_before(case):
    dsk, keys, width = case
    assert exclusive_trees(dsk, keys, width) == _reference(dsk, keys, width)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(graphs(), st.data())
def test_shared_leaves_are_copied_into_each_tree_that_reads_them(case, data):
    """With ``shared`` leaves, every tree is still a tree its root owns: it lists each key
    after its dependencies and holds every dependency of its keys; a shared leaf is listed
    once per key that reads it, each copy read before the next is made (maybe in other
    trees too), any other key once, and in one tree only."""
    dsk, keys, width = case
    leaves = sorted(k for k, node in dsk.items() if not node.dependencies)
    shared = set(data.draw(st.lists(st.sampled_from(leaves), unique=True))) if leaves else set()
    trees = exclusive_trees(dsk, keys, width, shared)
    seen: set = set()
    for root, tree in trees:
        assert tree[-1] == root and root not in shared
        for i, key in enumerate(tree):
            assert set(dsk[key].dependencies) <= set(tree[:i])
            assert key == root or key in shared or key not in keys
            if key in shared:  # this copy is read before the next copy is made
                after = tree[i + 1:]
                end = after.index(key) if key in after else len(after)
                assert any(key in dsk[k].dependencies for k in after[:end])
        inner = [k for k in tree if k not in shared]
        assert len(set(inner)) == len(inner) and not set(inner) & seen
        seen |= set(inner)
    assert exclusive_trees(dsk, keys, width, set()) == _reference(dsk, keys, width)


def test_a_transposed_sum_fuses_with_its_generated_blocks_made_twice():
    """``(x + x.T).sum()``: each generated block is read by two blocks of the sum, so no
    tree owns it; made again in each tree that reads it, the graph fuses as the plain sum."""
    from hpcgpu.array.optimization import fuse_generated_trees

    x = ha.random.normal(10, 1, size=(40, 40), chunks=(2, 2), seed=0, backend="cpu")
    y = (x + x.T).sum()
    keys = list(dask.core.flatten(y.__dask_keys__()))
    hlg = dask.blockwise.optimize_blockwise(y.__dask_graph__(), keys=keys)
    dsk = lazy_graph(hlg.cull(set(keys)))
    fused = fuse_generated_trees(dsk, keys, 32, min_leaves=2)  # a leaf per read: 16 blocks of the sum
    assert len(fused) < len(dsk) // 20
    assert not any(k[0] == x.name for k in fused if isinstance(k, tuple))  # every block made inside a tree
    # no block waits for its second reader: a task holds as many values at once as the plain sum's
    plain = (x + 1).sum()
    plain_dsk = lazy_graph(dask.blockwise.optimize_blockwise(plain.__dask_graph__(), keys=plain.__dask_keys__()))
    plain_fused = fuse_generated_trees(plain_dsk, plain.__dask_keys__(), 16, min_leaves=2)
    assert _most_held(fused) <= _most_held(plain_fused) + 1
    with dask.config.set({"hpcgpu.array.fuse-width": 0}):
        want = y.compute(scheduler="sync")
    np.testing.assert_allclose(dask.local.get_sync(materialize_remaining(fused), keys)[0], want, rtol=1e-12)


def _most_held(graph) -> int:
    """The most values any fused task of ``graph`` holds at once."""
    from hpcgpu.array.optimization import _last_reads, _run_fused, chain_tasks

    most = 0
    for node in graph.values():
        if getattr(node, "func", None) is _run_fused:
            tasks, held = chain_tasks(node.args[0].value.steps(), False), set()
            for task, done in zip(tasks, _last_reads(tasks)):
                held = (held | {task.key}) - set(done)
                most = max(most, len(held))
    return most


@st.composite
def expressions(draw):
    """An hpcgpu array expression: generated or given blocks, elementwise steps, a
    transpose, a slice, a reduction (a tree of legacy tasks), and sometimes only some of
    its output blocks asked for (a partial cull)."""
    chunks = draw(st.sampled_from([(2, 2), (3, 5), (4, 1)]))
    x = draw(st.sampled_from([
        lambda: ha.random.normal(0, 1, size=(12, 10), chunks=chunks, seed=1, backend="cpu"),
        lambda: ha.ones((12, 10), chunks=chunks, backend="cpu"),
        lambda: dask.array.from_array(np.arange(120.0).reshape(12, 10), chunks=chunks)]))()
    y = draw(st.sampled_from([lambda a: a + 1, lambda a: a[::2, 1:] * 2, lambda a: a[:10, :10] + a[:10, :10].T,
                              lambda a: a - a.mean(axis=0)]))(x)
    y = draw(st.sampled_from([lambda a: a.sum(), lambda a: a.std(axis=1), lambda a: a.max(axis=0), lambda a: a]))(y)
    keys = list(dask.core.flatten(y.__dask_keys__()))
    return y, draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True)) if draw(st.booleans()) else keys


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(expressions())
def test_the_cull_that_keeps_dependencies_gives_dasks_cull(case):
    """:func:`culled` keeps the graph ``HighLevelGraph.cull`` keeps, and the lazy graph made
    with what it found is the one made by searching every task again: the same keys, nodes
    and dependencies (their dict order may differ, as it does between two processes: it
    follows set order, and Python salts the hashes of strings per process)."""
    from hpcgpu.array.lazy_blocks import BlockStep, LegacyStep, culled

    y, keys = case
    hlg = dask.blockwise.optimize_blockwise(y.__dask_graph__(), keys=keys)
    plain, (mine, found) = hlg.cull(set(keys)), culled(hlg, keys)
    assert plain.dependencies == mine.dependencies and list(plain.layers) == list(mine.layers)
    want, got = lazy_graph(plain), lazy_graph(mine, found)
    assert want.keys() == got.keys() and len(want) == len(got)
    for key, node in want.items():
        assert type(got[key]) is type(node) and set(got[key].dependencies) == set(node.dependencies)
        if isinstance(node, LegacyStep):
            assert got[key].task is node.task and got[key].dependencies == node.dependencies
        elif isinstance(node, BlockStep):
            assert got[key].layer.get_output_keys() == node.layer.get_output_keys()  # culled alike
            assert got[key].dependencies == node.dependencies and got[key].inputs == node.inputs
        else:
            assert got[key] == node
