"""Fused block kernels (hpcgpu.array.fused): fused and unfused results over random expressions.

On the CPU the fused expressions are replayed by the NumPy backend, which makes the very
calls of the chain, so fused and unfused must be equal bit for bit: this checks what the
expressions capture (operands and their order, slices, axes, dtypes, fallbacks). On a GPU
the same expressions run as generated CUDA kernels: bit for bit without a reduction,
within the stated tolerance with one (the kernel adds in another order).
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpcgpu.array as ha
from hpcgpu.array.fused import replay
from hpcgpu.array.fused.expr import ArrayLeaf, LazyBlock, Map, RandomLeaf, Reduce, Slice

SHAPE, CHUNK = (64, 48), (4, 3)  # 256 blocks: the tree fusion needs fuse-width**2 of them
#: relative tolerance of fused reductions on a GPU, by dtype (another order of additions)
REDUCTION_RTOL = {"float64": 1e-9, "float32": 1e-3}

#: generated blocks, and blocks in memory (``from_array``)
SOURCES = ["normal", "normal32", "uniform", "integers", "ones", "full", "from_array"]
STEPS = st.one_of(
    st.tuples(st.just("scalar"), st.sampled_from(["+", "-", "*", "/", "r-", "r/", "**"]),
              st.sampled_from([1, 2, -0.5, 3.25, 2.0])),
    st.tuples(st.just("ufunc"), st.sampled_from(["sin", "exp", "sqrt", "abs", "negative", "tanh", "square",
                                                 "log1p"])),
    st.tuples(st.just("other"), st.sampled_from(["+", "*", "maximum", "-"])),
    st.tuples(st.just("where"), st.sampled_from([0.0, 0.5, 10.0])),
    st.tuples(st.just("astype"), st.sampled_from(["float32", "float64"])),
    st.tuples(st.just("slice"), st.sampled_from([(2, 1), (1, 3), (3, 2), (-1, 1)])),
)
REDUCTIONS = st.sampled_from([None, "sum", "mean", "min", "max", "prod", "std", "var"])
AXES = st.sampled_from([None, 0, 1, (0, 1)])


def _source(name: str, backend: str) -> da.Array:
    if name.startswith("normal"):
        return ha.random.normal(10, 2, size=SHAPE, chunks=CHUNK, seed=3, backend=backend,
                                dtype="float32" if name == "normal32" else "float64")
    if name == "uniform":
        return ha.random.uniform(-1, 2, size=SHAPE, chunks=CHUNK, seed=4, backend=backend)
    if name == "integers":
        return ha.random.integers(-50, 50, size=SHAPE, chunks=CHUNK, seed=5, backend=backend)
    if name == "ones":
        return ha.ones(SHAPE, chunks=CHUNK, backend=backend)
    if name == "full":
        return ha.full(SHAPE, 1.5, chunks=CHUNK, backend=backend)
    return ha.from_array(np.arange(np.prod(SHAPE), dtype="float64").reshape(SHAPE) / 100, chunks=CHUNK,
                         backend=backend)


def build(source: str, steps, reduction, axis, backend: str) -> da.Array:
    x = _source(source, backend)
    other = ha.random.uniform(0, 1, size=SHAPE, chunks=CHUNK, seed=9, backend=backend)
    for kind, *arg in steps:
        if kind == "scalar":
            op, c = arg
            x = {"+": lambda: x + c, "-": lambda: x - c, "*": lambda: x * c, "/": lambda: x / c,
                 "r-": lambda: c - x, "r/": lambda: c / (abs(x) + 1), "**": lambda: abs(x) ** c}[op]()
        elif kind == "ufunc":
            x = getattr(np, "absolute" if arg[0] == "abs" else arg[0])(x)
        elif kind == "other" and x.shape == other.shape:
            x = {"+": np.add, "*": np.multiply, "maximum": np.maximum, "-": np.subtract}[arg[0]](x, other)
        elif kind == "where":
            x = da.where(x > arg[0], x, arg[0] - 1)
        elif kind == "astype":
            x = x.astype(arg[0])
        elif kind == "slice":
            a, b = arg[0]
            x = x[::a, ::b]
    if reduction is None:
        return x
    return getattr(x, reduction)(axis=axis)


def compute(x: da.Array, fused: bool):
    with dask.config.set({"hpcgpu.array.fused-kernels": fused if fused is False else
                          (True if _backend_of(x) == "numpy" else "auto"), "scheduler": "sync"}):
        return x.compute()


def _backend_of(x) -> str:
    return type(x._meta).__module__.split(".")[0]


@pytest.fixture
def evaluated(monkeypatch):
    """The node types the NumPy backend computed (a fused chain computes its last node)."""
    seen: list = []
    original = replay.evaluate

    def spy(node, memo=None):
        if memo is None and not isinstance(node, ArrayLeaf):  # forcing a leaf computes nothing
            seen.append(type(node).__name__)
        return original(node, memo)

    monkeypatch.setattr(replay, "evaluate", spy)
    return seen


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from(SOURCES), steps=st.lists(STEPS, max_size=4), reduction=REDUCTIONS, axis=AXES)
def test_fused_chains_equal_the_unfused_bit_for_bit_on_numpy(source, steps, reduction, axis, evaluated):
    x = build(source, steps, reduction, axis, "cpu")
    with np.errstate(all="ignore"):
        want = compute(x, False)
        evaluated.clear()
        got = compute(x, True)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # each block's chain ended in one fused reduction; not asked where slices may drop
    # blocks (below 256 leaves, no fused tasks), nor of integer chains: abs and ** on
    # integers have no fused code, so those steps and the rest of the chain run unfused
    if reduction in ("sum", "min", "max", "prod") and source != "integers" \
            and not any(kind == "slice" for kind, *_ in steps):
        assert "Reduce" in evaluated


def test_the_array_sum_chain_is_one_expression_per_block(evaluated):
    x = ha.random.normal(10, 1, size=(64, 64), chunks=(4, 4), seed=0, backend="cpu")
    total = (x + 1)[::2, ::2].sum()
    want = compute(total, False)
    evaluated.clear()
    got = compute(total, True)
    assert got == want and evaluated == ["Reduce"] * 256


def test_steps_the_expressions_do_not_record_run_on_computed_blocks(evaluated):
    x = ha.random.normal(0, 1, size=(64, 64), chunks=(4, 4), seed=1, backend="cpu")
    odd = (x + 1).map_blocks(lambda b: np.sort(b, axis=1))[::2].sum()
    assert compute(odd, True) == compute(odd, False)
    assert "Map" in evaluated  # x + 1 was forced for the step it could not record


def test_lazy_blocks_record_operands_in_order_and_compose_slices():
    base = np.arange(24.0).reshape(4, 6)
    x = LazyBlock(ArrayLeaf(base), "numpy")
    y = (2 - x[::-1, 1::2])[1:, ::2]
    assert isinstance(y.node, Slice) and isinstance(y.node.child, Map) and y.shape == (3, 2)
    np.testing.assert_array_equal(y.force(), (2 - base[::-1, 1::2])[1:, ::2])
    z = np.sum(np.maximum(x, 3.5).astype("float32"), axis=1, keepdims=True)
    assert isinstance(z.node, Reduce) and z.dtype == np.float32 and z.shape == (4, 1)
    np.testing.assert_array_equal(z.force(), np.sum(np.maximum(base, 3.5).astype("float32"), axis=1, keepdims=True))
    with pytest.raises(TypeError):
        np.asarray(x)  # nothing turns a lazy block into NumPy data behind the chain's back


def test_an_int8_block_plus_an_out_of_range_python_int_falls_back_like_numpy():
    x = LazyBlock(ArrayLeaf(np.ones((2, 2), dtype="int8")), "numpy")
    with pytest.raises(TypeError):
        x + 1000
    assert (x + 1).dtype == np.int8


def test_kernel_sources_depend_on_shapes_not_on_keys():
    from hpcgpu.array.fused.cuda import kernel_source

    def source(key):
        leaf = LazyBlock(RandomLeaf("cupy", 0, "normal", (10.0, 1.0), "float64", (100, 100), key, (0, 0)), "cupy")
        return kernel_source(np.sum((leaf + 1)[::2, ::2], axis=(0, 1), keepdims=True).node)

    (one, args_one, plan), (two, args_two, _) = source(7), source(2**40 + 9)
    assert one == two and args_one != args_two and plan["reduced"] == 2500
    assert "rand_normal_f64" in one and "int r = p * 256" in one  # 32-bit indices where they fit


def test_kernel_signatures_list_leaves_in_the_order_of_the_kernel_arguments():
    from hpcgpu.array.fused.cuda import _arguments, kernel_source, signature

    a = LazyBlock(ArrayLeaf(np.ones((6, 4))), "cupy")
    r = LazyBlock(RandomLeaf("cupy", 0, "uniform", (0.0, 1.0), "float32", (6, 4), 2**33 + 5, (1, 2)), "cupy")
    expr = np.sum(np.where(r > 0.5, a[::-1], r * a) + a, axis=0, keepdims=True)
    leaves: list = []
    key = signature(expr.node, leaves, {})
    assert key == signature(expr.node, [], {}) and hash(key)
    assert [type(x).__name__ for x in leaves] == ["RandomLeaf", "ArrayLeaf"]
    source_args = kernel_source(expr.node)[1]
    assert len(source_args) == 3 and [int(v) for v in _arguments(leaves)[:2]] == [5, 2]
    assert source_args[2] is a.node.value


@pytest.mark.gpu
@settings(max_examples=40, deadline=None)
@given(source=st.sampled_from(SOURCES), steps=st.lists(STEPS, max_size=4), reduction=REDUCTIONS, axis=AXES)
def test_gpu_fused_kernels_equal_the_unfused_chain(source, steps, reduction, axis):
    import cupy

    x = build(source, steps, reduction, axis, "gpu")
    want, got = cupy.asnumpy(compute(x, False)), cupy.asnumpy(compute(x, True))
    assert got.dtype == want.dtype and got.shape == want.shape
    if reduction is None or reduction in ("min", "max") or got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)  # the same operations in the same order
    else:
        rtol = REDUCTION_RTOL[got.dtype.name]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.nanmax(np.abs(want), initial=1)))


def test_each_spelling_of_a_power_has_its_own_kernel():
    """``x ** 2`` is CuPy's ``square``, ``np.power(x, 2)`` its ``pow``: one cached kernel
    for both gave the second the first's bits (seen on an H200)."""
    from hpcgpu.array.fused.codegen import kernel_source
    from hpcgpu.array.fused.cuda import signature

    x = LazyBlock(ArrayLeaf(np.ones((4, 4))), "cupy")
    spellings = [x ** 2, np.power(x, 2), x ** 0.5, np.power(x, 0.5), x ** 2.0, x ** -1.0, x ** np.float64(2)]
    assert len({signature(y.node, [], {}) for y in spellings}) == len(spellings)
    body = [kernel_source(y.node)[0].split('extern "C"')[-1] for y in spellings]
    assert ["np_square(" in b for b in body] == [True, False, False, False, True, False, False]
    assert ["pow(" in b for b in body] == [False, True, False, True, False, False, True]


#: one step of each kind for which the kernels call a math function or multiply
GPU_STEPS = {"power 2": lambda a: a ** 2, "power 0.5": lambda a: a ** 0.5, "power 3.25": lambda a: a ** 3.25,
             "power -1.5": lambda a: a ** -1.5, "power -1.0": lambda a: a ** -1.0, "power 2.0": lambda a: a ** 2.0,
             "np.power 2": lambda a: np.power(a, 2), "np.power 0.5": lambda a: np.power(a, 0.5),
             "multiply then add": lambda a: a * 3.7 + 1.1,
             "square then subtract": lambda a: np.square(a) - a, "divide": lambda a: 1.3 / a,
             **{name: getattr(np, name) for name in ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
                                                     "sqrt", "cbrt", "sin", "cos", "tan", "arctan", "sinh",
                                                     "cosh", "tanh"]}}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("step", sorted(GPU_STEPS))
def test_gpu_each_fused_step_is_cupys_bit_for_bit(step, dtype):
    """The property test once found ``abs(normal) ** 2`` one ulp away from the unfused
    chain: CuPy's ``x ** 2`` is ``square``, not ``pow`` (and ``x ** 0.5`` is ``sqrt``)."""
    import cupy

    from hpcgpu.array.fused.cuda import evaluate

    a = cupy.asarray(np.random.default_rng(1).uniform(0.01, 8.0, size=(1000, 1000)).astype(dtype))
    fn = GPU_STEPS[step]
    want = cupy.asnumpy(fn(a))
    got = cupy.asnumpy(evaluate(fn(LazyBlock(ArrayLeaf(a), "cupy")).node))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("method,args,dtype", [("normal", (10.0, 2.0), "float64"), ("normal", (-1.0, 0.5), "float32"),
                                               ("uniform", (2.0, 5.0), "float64"), ("uniform", (0.0, 1.0), "float32"),
                                               ("integers", (-7, 1000), "int64"), ("integers", (3, 200), "uint8")])
def test_gpu_fused_random_leaves_are_todays_streams_bit_for_bit(method, args, dtype):
    import cupy

    from hpcgpu.array.fused.cuda import evaluate
    from hpcgpu.array.philox import philox_block
    from hpcgpu.array.random import block_seed

    shape = (301, 7)  # odd sizes: the last counter's values partly unused
    key = block_seed(5, (3, 7))
    leaf = LazyBlock(RandomLeaf("cupy", 5, method, args, dtype, shape, key, (3, 7)), "cupy")
    want = cupy.asnumpy(philox_block(key, method, args, dtype, shape))
    np.testing.assert_array_equal(cupy.asnumpy(evaluate((leaf * 1).node)), want * np.array(1, dtype))
    np.testing.assert_array_equal(cupy.asnumpy(evaluate(leaf[::3, 1::2].node)), want[::3, 1::2])
    got = cupy.asnumpy(evaluate(np.max(leaf, axis=1, keepdims=True).node))
    np.testing.assert_array_equal(got, want.max(axis=1, keepdims=True))
