"""A reduction's tree of combine nodes as one call of its top node (hpcgpu.array.treecollapse),
on Dask's own graphs: the same results as Dask's, and no combine node left."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
from dask._task_spec import convert_legacy_graph
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.array.lazy_blocks import LegacyStep
from hpcgpu.array.treecollapse import collapse, reduction_axes

REDUCTIONS = ("sum", "mean", "std", "var", "min", "max", "prod", "any", "all", "nansum", "nanmean",
              "nanvar", "nanmin", "argmin", "argmax", "count_nonzero")
ONE_AXIS_ONLY = ("argmin", "argmax")  # Dask's arg reductions take one axis or all


def _steps(y: da.Array) -> tuple:
    graph = convert_legacy_graph(dict(y.__dask_graph__()))
    priority = dask.order.order(graph)
    return tuple(graph[k] for k in sorted(graph, key=priority.get))


def _legacy(y: da.Array, steps) -> tuple:
    """``steps`` with each node that Dask's graph holds as a tuple as the optimiser holds it."""
    raw = dict(y.__dask_graph__())
    return tuple(LegacyStep(s.key, raw[s.key], s.dependencies) if type(raw[s.key]) is tuple else s for s in steps)


def _partial_nodes(steps) -> int:
    return sum(1 for s in steps if reduction_axes(s) is not None and "-partial-" in str(s.key))


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 20), min_size=1, max_size=3), chunk=st.integers(1, 4),
       reduction=st.sampled_from(REDUCTIONS), axis_seed=st.integers(0, 7), keepdims=st.booleans(),
       split_every=st.integers(2, 5), nan=st.booleans())
def test_a_collapsed_tree_gives_dasks_result_and_leaves_no_combine_node(shape, chunk, reduction, axis_seed,
                                                                         keepdims, split_every, nan):
    data = np.random.default_rng(sum(shape)).uniform(-1.5, 1.5, size=shape)
    if nan and reduction.startswith("nan"):
        data.flat[::3] = np.nan
    axes = [a for a in range(len(shape)) if axis_seed >> a & 1]
    axis = None if not axes else axes[0] if reduction in ONE_AXIS_ONLY or len(axes) == 1 else tuple(axes)
    x = da.from_array(data, chunks=chunk)
    kwargs = {} if reduction == "count_nonzero" else {"keepdims": keepdims, "split_every": split_every}
    y = getattr(da, reduction)(x, axis=axis, **kwargs)
    steps = _steps(y)
    collapsed = collapse(steps)
    keys = list(dask.core.flatten(y.__dask_keys__()))
    with np.errstate(all="ignore"):
        want = dask.get({s.key: s for s in steps}, keys)
        got = dask.get({s.key: s for s in collapsed}, keys)
    for g, w in zip(got, want):  # each output block
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert _partial_nodes(collapsed) == 0
    assert len(collapsed) == len(steps) - _partial_nodes(steps)
    # Dask's tuples as the optimiser holds them (LegacyStep, built only where they run): the
    # same nodes dropped, the same tops rebuilt
    legacy = _legacy(y, steps)
    from_legacy = collapse(legacy)
    assert [s.key for s in from_legacy] == [s.key for s in collapsed]
    assert [sorted(map(str, s.dependencies)) for s in from_legacy] == [sorted(map(str, s.dependencies)) for s in collapsed]


def test_a_combine_node_read_by_two_tasks_stays():
    """A node another task reads too is not taken into one reader's call."""
    x = da.ones((64,), chunks=4)
    steps = _steps(x.sum(split_every=4))
    partial = next(s for s in steps if "-partial-" in str(s.key))
    from dask._task_spec import Task, TaskRef

    extra = Task(("reader", 0), np.asarray, TaskRef(partial.key))
    collapsed = collapse(steps + (extra,))
    assert partial.key in {s.key for s in collapsed}
    assert dask.get({s.key: s for s in collapsed}, steps[-1].key) == 64
