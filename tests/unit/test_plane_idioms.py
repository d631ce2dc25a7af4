"""Dask's own ``a @ b``, ``x.rechunk(...)`` and tall-and-skinny ``da.linalg.qr``/``svd``
routed to the plane by hpcgpu's optimiser
(:mod:`hpcgpu.array.plane.idioms`): the same keys, chunks and values as Dask's graph, for
shapes and chunks hypothesis draws; layers that something else reads are left alone; and
``hpcgpu.array.collective`` decides, as the client had it."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
from dask.array.core import Array
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.array.optimization import ArrayOptimizer
from hpcgpu.array.plane.idioms import route
from hpcgpu.array.scope import Settings


def _always(kind):
    return True


def _run(graph, like):
    """``like``'s result computed from ``graph`` (the group of one runs the plane here)."""
    return Array(graph, like.name, like.chunks, meta=like._meta).compute(scheduler="sync")


def _chunks(draw, n):
    cuts = draw(st.lists(st.integers(1, n - 1), unique=True, max_size=3)) if n > 1 else []
    edges = [0, *sorted(cuts), n]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


@st.composite
def products(draw):
    m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
    dtype = draw(st.sampled_from(["float64", "float32", "int64", "complex128"]))
    a_chunks = (_chunks(draw, m), _chunks(draw, k))
    b_chunks = (draw(st.sampled_from([a_chunks[1], _chunks(draw, k)])), _chunks(draw, n))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = (rng.random((m, k)) * 10).astype(dtype)
    b = (rng.random((k, n)) * 10).astype(dtype)
    return da.from_array(a, chunks=a_chunks), da.from_array(b, chunks=b_chunks)


@settings(max_examples=40, deadline=None)
@given(products(), st.sampled_from(["matmul", "dot"]))
def test_a_product_routed_to_the_plane_keeps_keys_chunks_and_values(ab, how):
    a, b = ab
    y = a @ b if how == "matmul" else a.dot(b)
    routed = route(y.__dask_graph__(), _always, y.__dask_keys__())
    kinds = {name.split("-")[0] for name in routed.layers}
    plane = any(k.startswith("plane") for layer in routed.layers.values() for k in map(str, layer))
    # Dask's matmul sums block products when the inner axis has several blocks (one block: a
    # getitem); its dot always sums, and keeps the sum's dtype (int32 products sum as int64)
    summed = any(n.startswith(("_chunk_sum-aggregate-", "sum-aggregate-")) for n in y.dask.layers)
    routable = summed and y.dtype == a.dtype == b.dtype
    assert plane == routable and (how in kinds or "tensordot" in kinds) != routable, sorted(kinds)
    assert y.name in routed.layers and set(routed.layers[y.name].keys()) >= set(dask.core.flatten(y.__dask_keys__()))
    got = _run(routed, y)
    assert got.dtype == y.dtype and np.allclose(got, a.compute() @ b.compute())


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_rechunk_routed_to_the_plane_equals_dasks_exactly(data):
    shape = tuple(data.draw(st.integers(1, 12)) for _ in range(data.draw(st.integers(1, 3))))
    old = tuple(_chunks(data.draw, n) for n in shape)
    new = tuple(_chunks(data.draw, n) for n in shape)
    x = da.from_array(np.arange(np.prod(shape), dtype="int32").reshape(shape), chunks=old)
    y = x.rechunk(new, method="tasks")
    routed = route(y.__dask_graph__(), _always, y.__dask_keys__())
    moved = old != new and x.npartitions > 1
    assert (not any(n.startswith("rechunk-") for n in routed.layers if n != y.name)) or not moved
    assert (routed is not y.__dask_graph__()) == moved
    assert np.array_equal(_run(routed, y), x.compute())


def test_each_routed_operation_says_so_once(caplog):
    x = da.from_array(np.arange(64.0).reshape(8, 8), chunks=4)
    y = x.rechunk((8, 2), method="tasks") @ x
    with caplog.at_level("INFO", logger="distributed.hpcgpu.plane"):
        routed = route(y.__dask_graph__(), _always, y.__dask_keys__())
    said = sorted(r.getMessage().split(":")[0] for r in caplog.records)
    ran = sorted(str(k).split("-")[2] for k in dict(routed) if str(k).startswith("plane-barrier-"))
    assert said == ran and "matmul" in said and "rechunk" in said, said  # Dask aligns x too


def test_what_is_not_chosen_or_is_read_elsewhere_stays():
    x = da.from_array(np.arange(64.0).reshape(8, 8), chunks=4)
    y = x @ x
    graph = y.__dask_graph__()
    assert route(graph, lambda kind: False, y.__dask_keys__()) is graph
    assert route(graph, lambda kind: kind == "rechunk", y.__dask_keys__()) is graph
    partial = next(n for n in graph.layers if n.startswith("chunk_sum-"))
    both = da.Array(graph, y.name, y.chunks, meta=y._meta)
    # a graph that also asks for the products' partial sums keeps Dask's layers
    assert route(graph, _always, [y.__dask_keys__(), [(partial, 0, 0, 0)]]) is graph
    assert np.allclose(_run(route(graph, _always, y.__dask_keys__()), both), x.compute() @ x.compute())
    z = x.rechunk((8, 2), method="tasks")
    # Dask starts the second rechunk from the first one's middle stage: three chains
    w = z + z.rechunk((2, 8), method="tasks")
    routed = route(w.__dask_graph__(), _always, w.__dask_keys__())
    assert np.array_equal(_run(routed, w), 2 * x.compute())
    assert sum(1 for k in dict(routed) if str(k).startswith("plane-barrier-rechunk")) == 3


def test_the_choice_travels_with_the_graph_as_the_client_had_it():
    with dask.config.set({"hpcgpu.array.collective": "always"}):
        sent = pickle.loads(pickle.dumps(ArrayOptimizer()))
    assert sent.settings.collective == "always" and sent.settings.workers == 0
    assert Settings.current().collective == "auto"
    import hpcgpu.array as ha

    x = ha.from_array(np.arange(64.0).reshape(8, 8), chunks=4)
    y = x @ x
    keys = list(dask.core.flatten(y.__dask_keys__()))
    plane = sent(y.__dask_graph__(), keys)
    dask_own = ArrayOptimizer(Settings(collective="auto", workers=0))(y.__dask_graph__(), keys)
    assert any("plane-barrier" in str(k) for k in dict(plane)) and not any("plane" in str(k) for k in dict(dask_own))
    assert any("plane-barrier" in str(k) for k in dict(ArrayOptimizer(Settings(workers=2))(y.__dask_graph__(), keys)))


@st.composite
def tall_skinny(draw):
    cols = draw(st.integers(1, 6))
    rows = draw(st.lists(st.integers(cols, 3 * cols + 4), min_size=2, max_size=12))  # 1 block: no TSQR
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = rng.standard_normal((sum(rows), cols)).astype(draw(st.sampled_from(["float64", "float32"])))
    return da.from_array(a, chunks=(tuple(rows), (cols,)))


def _routed(outputs, kind):
    graph = outputs[0].__dask_graph__()
    for x in outputs[1:]:
        graph = graph.merge(graph, x.__dask_graph__())
    routed = route(graph, lambda k: k == kind, [x.__dask_keys__() for x in outputs])
    assert not any(n.startswith(("qr-", "stack-", "svd-")) for n in routed.layers), list(routed.layers)
    return [_run(routed, x) for x in outputs]


@settings(max_examples=15, deadline=None)
@given(tall_skinny())
def test_dasks_tall_and_skinny_svd_and_qr_routed_to_the_plane_equal_dasks(x):
    """Dask's TSQR, with its stacked R factors factored by a TSQR of their own where there
    are many blocks: the plane's u, s, v equal Dask's (after its sign flip), q r = x."""
    tol = 1e-4 if x.dtype == np.float32 else 1e-10
    u, s, v = da.linalg.svd(x)
    got, want = _routed([u, s, v], "tsqr"), dask.compute(u, s, v, scheduler="sync")
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
    scale = max(1.0, float(want[1][0]))
    assert np.abs(got[1] - want[1]).max() <= tol * scale
    assert np.abs((got[0] * got[1]) @ got[2] - x.compute()).max() <= tol * scale * 10
    q, r = da.linalg.qr(x)
    gq, gr = _routed([q, r], "tsqr")
    assert np.abs(gq @ gr - x.compute()).max() <= tol * scale * 10
    assert np.abs(np.tril(gr, -1)).max() == 0 and np.abs(gq.T @ gq - np.eye(x.shape[1])).max() <= tol * 10
