"""Reductions over blocks computed before (hpcgpu.array.regroup): a task per group of
blocks and one final combine, with Dask's own results.

A persisted array reaches the optimiser as a layer of futures, which Dask turns into keys
the graph reads but does not hold; a layer of ``TaskRef`` s to the blocks' own keys is the
same graph without a cluster (``distributed.Future`` is a ``TaskRef``). The blocks are
given to ``dask.get`` as data, as the workers hold them.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np
from dask._task_spec import DataNode, TaskRef
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from hypothesis import example, given, settings
from hypothesis import strategies as st

import hpcgpu.array as ha
from hpcgpu.array.optimization import _run_fused, optimize
from hpcgpu.array.scope import Settings
from test_fused import REDUCTION_RTOL

REDUCTIONS = ("sum", "mean", "std", "var", "min", "max", "prod", "argmin", "argmax")  # arg*: ties, the first index
STEPS = st.sampled_from(["+1", "*0.5", "abs", "exp", "square", "transpose"])


def _expression(x: da.Array, steps, reduction: str, axis):
    for step in steps:
        x = {"+1": lambda: x + 1, "*0.5": lambda: x * 0.5, "abs": lambda: abs(x), "exp": lambda: np.exp(x),
             "square": lambda: x * x, "transpose": lambda: x + x.T if x.shape[0] == x.shape[1] else x}[step]()
    if reduction.startswith("arg") and isinstance(axis, tuple):
        axis = None  # an arg reduction takes one axis or all
    return getattr(x, reduction)(axis=axis)


def persisted_graph(y: da.Array, x: da.Array) -> tuple[HighLevelGraph, dict]:
    """``y``'s graph with ``x``'s layer replaced as a persisted array's reaches the
    scheduler, and ``x``'s blocks."""
    blocks = dict(zip(dask.core.flatten(x.__dask_keys__()), dask.compute(*x.to_delayed().ravel())))
    graph = y.__dask_graph__()
    layers = dict(graph.layers, **{x.name: MaterializedLayer({k: TaskRef(k) for k in blocks})})
    return HighLevelGraph(layers, dict(graph.dependencies)), blocks


def run(y: da.Array, graph, blocks: dict, width, threads: int = 1):
    """``y`` with ``graph`` through hpcgpu's optimiser at ``width``, run with ``blocks`` in memory; and its tasks."""
    opt = dict(optimize(graph, y.__dask_keys__(), settings=Settings(width=width, scope="all", threads=threads)))
    finalize, args = y.__dask_postcompute__()
    return finalize(dask.get({**opt, **{k: DataNode(k, v) for k, v in blocks.items()}}, y.__dask_keys__()), *args), opt


def check_equal(got, want, reduction: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if reduction in ("min", "max") or got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        rtol = REDUCTION_RTOL[got.dtype.name]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.nanmax(np.abs(want), initial=1)))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 24), cols=st.integers(1, 24), chunk=st.integers(2, 5), width=st.sampled_from([3, 4, 8, 16]),
       steps=st.lists(STEPS, max_size=3), reduction=st.sampled_from(REDUCTIONS),
       axis=st.sampled_from([None, 0, 1, (0, 1)]), ints=st.booleans())
# x + 1 read twice by (x + 1) + (x + 1).T: each reader's tree makes it again (it was a task per block)
@example(rows=5, cols=5, chunk=2, width=3, steps=["+1", "transpose"], reduction="sum", axis=None, ints=False)
# ties: Dask's argmin gives the first index in its tree's order; partial results combined
# per group gave another one of the tied indices (20, not Dask's 125)
@example(rows=24, cols=24, chunk=2, width=4, steps=["transpose"], reduction="argmin", axis=None, ints=True)
def test_a_reduction_over_a_persisted_array_equals_dasks(rows, cols, chunk, width, steps, reduction, axis, ints):
    data = np.random.default_rng(rows * cols).uniform(0.5, 1.5, size=(rows, cols))
    data = (data * 4).astype(np.int64) if ints else data
    x = da.from_array(data, chunks=chunk)
    y = _expression(x, steps, reduction, axis)
    graph, blocks = persisted_graph(y, x)
    with np.errstate(all="ignore"):
        want = y.compute(scheduler="sync")
        got, opt = run(y, graph, blocks, width)
    check_equal(got, want, reduction)
    leaves = len(blocks)
    reads = 2 ** steps.count("transpose") if rows == cols else 1  # x + x.T reads each block twice
    if axis in (None, (0, 1)) and leaves >= width * width:  # a task per group of about width reads, one combine
        assert len(opt) <= 2 * math.ceil(leaves * reads / width) + 2, len(opt)


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 24), chunk=st.integers(2, 5), steps=st.lists(STEPS, max_size=2),
       reduction=st.sampled_from(REDUCTIONS), axis=st.sampled_from([None, 0, 1]))
def test_a_reduction_over_from_array_equals_dasks(rows, chunk, steps, reduction, axis):
    """Blocks in the graph (``from_array`` of NumPy data) are the fused trees' leaves."""
    data = np.random.default_rng(rows).normal(size=(rows, rows + 3))
    y = _expression(ha.from_array(data, chunks=chunk), steps, reduction, axis)
    want = _expression(da.from_array(data, chunks=chunk), steps, reduction, axis).compute(scheduler="sync")
    with np.errstate(all="ignore"), dask.config.set({"hpcgpu.array.fuse-width": 3}):
        got = y.compute(scheduler="sync")
    check_equal(got, want, reduction)


def test_a_persisted_mean_is_a_task_per_group_and_one_combine():
    """2,500 persisted blocks at 156 per task (2 threads' auto width): 20 tasks, each
    given its blocks and giving one partial result; before, one task per block and Dask's
    tree (3,362 tasks)."""
    x = da.from_array(np.arange(400 * 400, dtype=float).reshape(400, 400), chunks=8)
    y = x.mean()
    graph, blocks = persisted_graph(y, x)
    got, opt = run(y, graph, blocks, "auto", threads=2)
    assert got == np.arange(400 * 400).mean()
    fused = [t for t in opt.values() if getattr(t, "func", None) is _run_fused]
    assert len(opt) == len(fused) <= 21
    read = [d for t in fused for d in t.dependencies if d in blocks]
    assert sorted(read) == sorted(blocks)  # each block read by one task: none moves twice
    # each pack combines its blocks' partial results into one (the final task read 2,500
    # of them, moved one by one, and ran Dask's tree of 863 combines over them)
    packs = [k for k in opt if isinstance(k, tuple) and k[0].endswith("-pack")]
    final, = set(opt) - set(packs)
    assert set(opt[final].dependencies) == set(packs)
    data = {k: DataNode(k, v) for k, v in blocks.items()}
    for pack in packs:
        (partial,) = dask.get({**opt, **data}, [pack])
        assert set(partial) == {"n", "total"} and partial["n"].shape == (1, 1), partial


def test_a_graph_without_computed_blocks_is_not_regrouped():
    x = da.ones((64, 64), chunks=4)
    y = (x + 1).sum()
    plain = dict(optimize(y.__dask_graph__(), y.__dask_keys__(), settings=Settings(width=16, scope="all")))
    assert not any(isinstance(k, tuple) and k[0].endswith("-pack") for k in plain)
    assert len(plain) == 21 and dask.get(plain, y.__dask_keys__()) == (64 * 64 * 2,)


def test_each_pack_reads_the_blocks_of_one_worker():
    """With the scheduler in this process, the packs follow the blocks' workers: no block moves."""
    from distributed import Client, LocalCluster, futures_of, wait

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        x = client.persist(da.from_array(np.arange(240 * 240, dtype=float).reshape(240, 240), chunks=8))
        wait(x)
        y = (x + 1).sum()
        graph = y.__dask_graph__()
        opt = dict(optimize(graph, y.__dask_keys__(), settings=Settings(width="auto", scope="all", threads=2)))
        where = {k: min(v) for k, v in client.who_has(futures_of(x)).items()}
        packs = [t for k, t in opt.items() if k[0].endswith("-pack")]
        assert len(set(where.values())) == 2 and len(packs) >= 2
        assert all(len({where[d] for d in t.dependencies}) == 1 for t in packs)
        with dask.config.set({"hpcgpu.array.scope": "all", "array_optimize": None}):
            assert y.compute() == (np.arange(240 * 240) + 1).sum()
        both = (x + x.T).sum()  # each key reads two blocks, maybe of two workers
        opt = dict(optimize(both.__dask_graph__(), both.__dask_keys__(), settings=Settings(width="auto", scope="all", threads=2)))
        assert len(opt) < 60 and dask.get({**opt, **{f.key: DataNode(f.key, f.result()) for f in futures_of(x)}},
                                          both.__dask_keys__()) == (2 * np.arange(240 * 240).sum(),)


def test_auto_fuses_a_small_graph_where_each_thread_still_gets_four_tasks():
    """100 generated blocks: fused on one thread (64 leaves suffice there: Dask's 238
    tasks took 0.7 s on one CPU worker, 0.87 s on one H200), Dask's own graph on four
    threads (256), where fused tasks of 16 blocks would leave threads idle."""
    y = (ha.random.normal(10, 1, size=(80, 80), chunks=8, seed=0, backend="cpu") + 1)[::2, ::2].sum()
    want = y.compute(scheduler="sync")
    for threads, most in ((1, 12), (2, None), (4, None)):
        graph = dict(optimize(y.__dask_graph__(), y.__dask_keys__(),
                              settings=Settings(width="auto", scope="all", threads=threads)))
        if most is None:
            assert len(graph) > 200, (threads, len(graph))
        else:
            assert len(graph) <= most, (threads, len(graph))
        (got,) = dask.get(graph, y.__dask_keys__())
        np.testing.assert_allclose(got, want, rtol=1e-12)  # the same sums, grouped otherwise
