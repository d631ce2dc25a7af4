"""A reduction's chunk step over many small computed blocks as one call
(hpcgpu.array.chunkbatch): each block's partial result is the one it gives alone."""

from __future__ import annotations

import dask.array as da
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.array.chunkbatch import run_chunks_batched
from hpcgpu.array.lazy_blocks import BlockStep, build_blocks, lazy_graph

REDUCTIONS = ("sum", "prod", "min", "max", "any", "all", "mean", "std", "var", "nansum", "nanmean", "nanmin",
              "nanmax", "nanvar", "argmin", "argmax")
LEFT_ALONE = ("argmin", "argmax")  # their partial results carry each block's offset


def _chunk_steps(y: da.Array, x: da.Array) -> list:
    graph = lazy_graph(y.__dask_graph__())
    return [s for s in graph.values() if isinstance(s, BlockStep) and s.dependencies
            and all(d[0] == x.name for d in s.dependencies)]


def _same(got, want) -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 12), min_size=1, max_size=3), chunk=st.integers(1, 4),
       reduction=st.sampled_from(REDUCTIONS), axis_seed=st.integers(1, 7), ints=st.booleans())
def test_each_blocks_partial_result_is_the_one_it_gives_alone(shape, chunk, reduction, axis_seed, ints):
    data = np.random.default_rng(sum(shape)).uniform(-2, 2, size=shape)
    data = np.round(data * 3).astype(np.int64) if ints else np.where(data > 1.5, np.nan, data)
    axes = tuple(a for a in range(len(shape)) if axis_seed >> a & 1) or (0,)
    x = da.from_array(data, chunks=chunk)
    y = getattr(da, reduction)(x, axis=axes[0] if reduction in LEFT_ALONE else axes)
    steps = _chunk_steps(y, x)
    blocks = dict(zip(_keys(x), _blocks(x)))
    values = dict(blocks)
    with np.errstate(all="ignore"):
        rest = run_chunks_batched(steps, values)
        built = build_blocks(steps)
        for step in steps:
            if step.key in values:
                _same(values[step.key], built[step.key](blocks))
    shapes = {blocks[s.dependencies[0]].shape for s in steps}
    if reduction in LEFT_ALONE:
        assert len(rest) == len(steps)
    else:  # every shape with two blocks or more went in one call
        alone = [s for s in steps if sum(blocks[t.dependencies[0]].shape == blocks[s.dependencies[0]].shape
                                         for t in steps) == 1]
        assert sorted(map(str, (s.key for s in rest))) == sorted(map(str, (s.key for s in alone))), shapes


def _keys(x: da.Array) -> list:
    import dask

    return list(dask.core.flatten(x.__dask_keys__()))


def _blocks(x: da.Array) -> list:
    import dask

    return list(dask.compute(*x.to_delayed().ravel(), scheduler="sync"))


def test_blocks_over_the_size_limit_run_one_by_one():
    x = da.ones((4, 4096), chunks=(1, 4096))  # 32 KiB blocks
    steps = _chunk_steps(x.sum(axis=(0, 1)), x)
    values = dict(zip(_keys(x), _blocks(x)))
    assert len(run_chunks_batched(steps, dict(values), limit=16 * 1024)) == 4
    assert run_chunks_batched(steps, values) == ()


def test_generated_blocks_reach_their_reduction_step_in_one_call_per_task(monkeypatch):
    """``x.std()`` of generated blocks: each fused task draws its blocks one by one and runs
    their ``moment_chunk`` as one call (it ran once per block), with Dask's result."""
    import dask

    import hpcgpu.array as ha
    from hpcgpu.array import chunkbatch
    from hpcgpu.array.optimization import optimize
    from hpcgpu.array.scope import Settings

    calls = []
    original = chunkbatch._run_held

    def counted(func, kwargs, held, values):
        calls.append((getattr(func, "func", func).__name__, len(held)))
        return original(func, kwargs, held, values)

    monkeypatch.setattr(chunkbatch, "_run_held", counted)
    x = ha.random.normal(10, 1, size=(160, 160), chunks=(8, 8), seed=0, backend="cpu")  # 400 blocks
    y = x.std()
    graph = dict(optimize(y.__dask_graph__(), y.__dask_keys__(), settings=Settings(width="auto", scope="all", threads=1)))
    fused = sum(1 for v in graph.values() if "_run_fused" in str(getattr(v, "func", "")))
    got = dask.get(graph, y.__dask_keys__())
    want = y.compute(scheduler="sync", optimize_graph=False)
    assert fused >= 2 and len(calls) == fused, (fused, calls)
    # all blocks but, per task, the one of the chain it runs first to learn whether fused kernels apply
    assert {name for name, _ in calls} == {"moment_chunk"} and 400 - fused <= sum(n for _, n in calls) <= 400, calls
    np.testing.assert_allclose(got, want, rtol=1e-12)
