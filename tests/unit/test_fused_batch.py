"""Alike block chains recorded once and run as one batch (hpcgpu.array.fused.batch).

On the CPU the batch is replayed block by block by the NumPy backend, so batched results
must equal the unbatched ones bit for bit; what is checked here is which chains count as
alike (never two that could compute different values), that a group is recorded once, and
that everything else still runs block by block. The GPU tests run the batched CUDA
kernels against the per-block ones.
"""

from __future__ import annotations

import itertools

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import hpcgpu.array as ha
import hpcgpu.array.optimization as optimization
from hpcgpu.array.fused import batch
from hpcgpu.array.fused.batch import NotAlike, chain_print, split_chains
from hpcgpu.array.random import block_seed, block_seeds
from test_fused import REDUCTION_RTOL, SOURCES, STEPS, build, compute


@pytest.fixture
def counted(monkeypatch):
    """How many chains were recorded one by one, and how many blocks ran in batches."""
    seen = {"recorded": 0, "batched": 0}
    run_step, evaluate_batch = optimization.run_step, batch._evaluate_batch

    def recording(task, values, backends):
        seen["recorded"] += 1
        return run_step(task, values, backends)

    def batching(backend, node, block_ids):
        seen["batched"] += len(block_ids)
        return evaluate_batch(backend, node, block_ids)

    monkeypatch.setattr(optimization, "run_step", recording)
    monkeypatch.setattr(batch, "_evaluate_batch", batching)
    return seen


def _chains(x: da.Array) -> list:
    """The chains of the fused tasks of ``x``'s optimized graph."""
    (opt,) = dask.optimize(x)
    tasks = [t for t in dict(opt.__dask_graph__()).values() if getattr(t, "func", None) is optimization._run_fused]
    assert tasks, "no fused task"
    return [chain for task in tasks for chain in split_chains(task.args[0].value.steps())]


def test_the_array_sum_is_recorded_once_per_group_and_batched(counted):
    x = ha.random.normal(10, 1, size=(64, 64), chunks=(4, 4), seed=0, backend="cpu")
    total = (x + 1)[::2, ::2].sum()
    want = compute(total, False)
    counted.update(recorded=0, batched=0)
    assert compute(total, True) == want
    assert counted["batched"] == 256
    # per fused task: the representative's three steps, then its tree; never a block's
    assert counted["recorded"] < 256, counted


def test_blocks_of_another_shape_form_their_own_group(counted):
    x = ha.random.uniform(0, 1, size=(70, 66), chunks=(4, 4), seed=1, backend="cpu")  # edge blocks 2 wide
    total = np.sqrt(x * 3).max()
    groups: dict = {}
    for chain in _chains(total):
        printed, coords = chain_print(chain, {})
        groups.setdefault(printed, set()).add(tuple(c[i] for c, i in zip(x.chunks, coords)))
    assert all(len(shapes) == 1 for shapes in groups.values()), groups  # one block shape per group
    assert {shape for (shape,) in groups.values()} == {(4, 4), (2, 4), (4, 2), (2, 2)}
    want = compute(total, False)
    assert compute(total, True) == want and counted["batched"] > 0


def test_a_users_function_is_alike_only_to_itself():
    x = ha.random.normal(0, 1, size=(64, 64), chunks=(4, 4), seed=2, backend="cpu")
    # impure on purpose: in one batch every block would get the first block's draw
    noisy = x.map_blocks(lambda b: b + np.random.default_rng().random()).sum()
    chains = _chains(noisy)
    assert chains
    for chain in chains:
        with pytest.raises(NotAlike):
            chain_print(chain, {})


def test_an_impure_users_function_keeps_a_value_per_block():
    calls = itertools.count()  # impure on purpose: each call of the function gives the next number
    x = ha.random.normal(0, 1, size=(64, 64), chunks=(4, 4), seed=2, backend="cpu")
    numbered = x.map_blocks(lambda b: b * 0 + next(calls))
    largest = compute(numbered.max(), True)  # 256 blocks in a few fused tasks
    assert largest >= 255  # batched, the blocks of a task would have their first block's number


def test_blocks_in_memory_are_never_batched(counted):
    data = np.arange(64 * 64, dtype=float).reshape(64, 64)
    total = (ha.from_array(data, chunks=(4, 4), backend="cpu") + 1).sum()
    assert compute(total, True) == compute(total, False) == (data + 1).sum()
    assert counted["batched"] == 0


@pytest.mark.parametrize("expression", ["x.T * 2", "(x + x.T) * 2", "x * x[::-1]"])
def test_transposed_and_shared_generated_blocks_batch_with_their_own_keys(expression):
    """A generator read transposed (block (i, j) is drawn with key (j, i)) is no batch of
    its output coordinates, and a block read by two chains is made for each: the square
    array's chains are alike, so a batch that took coordinates for keys would be wrong."""
    x = ha.random.normal(0, 1, size=(64, 64), chunks=(4, 4), seed=3, backend="cpu")
    total = eval(expression, {"x": x}).sum(axis=0)
    with dask.config.set({"hpcgpu.array.fuse-width": 16}):
        got = compute(total, True)
        if expression == "x.T * 2":
            for chain in _chains(total):
                with pytest.raises(NotAlike):
                    chain_print(chain, {})
    np.testing.assert_array_equal(got, compute(total, False))


@settings(max_examples=200, deadline=None)
@given(seed=st.one_of(st.integers(0, 2**32), st.integers(0, 2**130)),
       ids=st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=4), min_size=1, max_size=8))
def test_block_seeds_are_numpys_seed_sequence_keys(seed, ids):
    ndim = len(ids[0])
    ids = [tuple(b[:ndim]) + (0,) * (ndim - len(b)) for b in ids]  # one dimensionality per array
    assert block_seeds(seed, ids).tolist() == [block_seed(seed, b) for b in ids]


@settings(max_examples=60, deadline=None)
@given(source=st.sampled_from(SOURCES), steps=st.lists(STEPS, max_size=4),
       reduction=st.sampled_from([None, "sum", "min", "max", "prod", "mean"]),
       axis=st.sampled_from([None, 0, 1, (0, 1)]))
@example(source="normal", steps=[("slice", (-1, 1)), ("slice", (1, 3)), ("ufunc", "exp")],
         reduction="sum", axis=0)  # 1 ulp apart: partial sums added in another order
def test_batched_chains_equal_the_unfused_on_numpy(source, steps, reduction, axis):
    """Every element bit for bit, and min, max and integer reductions; a float sum, product
    or mean to rounding: the batch combines its blocks' partial results in an order of its
    own, and floating-point addition is not associative."""
    x = build(source, steps, reduction, axis, "cpu")
    with np.errstate(all="ignore"):
        want, got = compute(x, False), compute(x, True)
    assert got.dtype == want.dtype and got.shape == want.shape
    if reduction in (None, "min", "max") or got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        rtol = REDUCTION_RTOL[got.dtype.name]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.nanmax(np.abs(want), initial=1)))


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(source=st.sampled_from(["normal", "normal32", "uniform", "integers"]), steps=st.lists(STEPS, max_size=3),
       reduction=st.sampled_from(["sum", "min", "max", "prod"]), axis=st.sampled_from([None, 0, 1, (0, 1)]))
@example(source="normal", steps=[("scalar", "**", 2)], reduction="min", axis=None)  # pow one ulp off (fixed)
def test_gpu_batched_kernels_equal_the_unfused_chain(source, steps, reduction, axis):
    import cupy

    x = build(source, steps, reduction, axis, "gpu")
    with np.errstate(all="ignore"):
        want, got = cupy.asnumpy(compute(x, False)), cupy.asnumpy(compute(x, True))
    assert got.dtype == want.dtype and got.shape == want.shape
    if reduction in ("min", "max") or got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        rtol = REDUCTION_RTOL[got.dtype.name]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.nanmax(np.abs(want), initial=1)))


@pytest.mark.gpu
def test_gpu_the_array_sum_runs_as_batches(counted):
    import cupy

    x = ha.random.normal(10, 1, size=(2000, 2000), chunks=(100, 100), seed=0, backend="gpu")
    total = (x + 1)[::2, ::2].sum()
    want = float(compute(total, False))
    counted.update(recorded=0, batched=0)
    got = float(cupy.asnumpy(compute(total, True)))
    assert counted["batched"] == 400 and counted["recorded"] < 400
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("one,other", [(1.0, np.float64(1.0)), (0.0, -0.0), (1, True), (1, 1.0),
                                       (np.float32(2), np.float64(2)), ((1, 2), [1, 2]),
                                       (slice(0, 4, 2), slice(0, 4, 1)), ("a", b"a")])
def test_prints_tell_apart_constants_that_compute_differently(one, other):
    from hpcgpu.array.fused.batch import _value

    assert _value(one, None) != _value(other, None)
    assert _value(one, None) == _value(one, None)


def test_only_functions_known_to_be_pure_make_chains_alike():
    import functools
    import operator

    from dask.array.chunk import getitem
    from toolz import compose

    from hpcgpu.array.fused.batch import _function

    for func in (np.add, getitem, operator.add, tuple, getattr, functools.partial(np.sum, axis=1),
                 compose(np.sum, np.abs), operator.methodcaller("astype", "f4")):
        assert _function(func) == _function(func)
    for func in (next, print, compose(np.sum, lambda x: x), functools.partial(lambda x: x), lambda x: x):
        with pytest.raises(NotAlike):
            _function(func)
