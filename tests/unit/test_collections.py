"""hpcgpu.array / hpcgpu.dataframe on the CPU path (NumPy/pandas), and on a GPU when marked."""

from __future__ import annotations

import operator
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from distributed import Client, LocalCluster

import dask
import dask.array as da

import hpcgpu.array as ha
import hpcgpu.dataframe as hd
from hpcgpu.system.backends import cuda_device_count
from hpcgpu.system.workers import scheduler_workers


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _draw(seed=7, chunks=(30, 40)):
    return ha.random.normal(10, 2, size=(90, 80), chunks=chunks, seed=seed, backend="cpu")


def test_random_is_reproducible_whatever_the_placement(client):
    reference = _draw().compute(scheduler="sync")
    assert np.array_equal(_draw().compute(scheduler="threads"), reference)
    assert np.array_equal(client.compute(_draw()).result(), reference)
    # blocks computed one by one, in reverse order, on named workers
    workers = list(scheduler_workers(client))
    x = _draw()
    blocks = {}
    for n, key in enumerate(reversed(list(dask.core.flatten(x.__dask_keys__())))):
        blocks[key] = client.compute(x.blocks[key[1:]], workers=[workers[n % 2]]).result()
    assert np.array_equal(np.block([[blocks[(x.name, i, j)] for j in range(2)] for i in range(3)]),
                          reference)


def test_random_differs_by_seed_and_block():
    a, b = _draw(seed=1).compute(), _draw(seed=2).compute()
    assert not np.array_equal(a, b)
    assert not np.array_equal(a[:30, :40], a[30:60, :40])
    assert abs(a.mean() - 10) < 0.2 and abs(a.std() - 2) < 0.2


def test_other_distributions():
    u = ha.random.uniform(-1, 1, size=10_000, chunks=1000, seed=0, backend="cpu").compute()
    assert u.min() >= -1 and u.max() < 1 and abs(u.mean()) < 0.05
    r = ha.random.random(size=(100, 100), chunks=50, seed=0, backend="cpu")
    assert 0.45 < float(r.mean().compute()) < 0.55
    i = ha.random.integers(5, 9, size=1000, chunks=100, seed=0, backend="cpu").compute()
    assert set(np.unique(i)) == {5, 6, 7, 8} and i.dtype == np.int64
    s = ha.random.standard_normal(size=(2000,), chunks=500, seed=3, backend="cpu", dtype="float32")
    assert s.dtype == np.float32 and s.compute().dtype == np.float32


def test_dask_array_api_works_on_the_collections(client):
    x = ha.random.random((600, 40), chunks=(100, 40), seed=5, backend="cpu")
    ref = x.compute()
    u, s, v = da.linalg.svd(x)
    np.testing.assert_allclose(client.compute(s).result(), np.linalg.svd(ref, compute_uv=False))
    q, r = da.linalg.qr(x)
    np.testing.assert_allclose(client.compute(q @ r).result(), ref, atol=1e-10)
    np.testing.assert_allclose(float(x.std().compute()), ref.std())
    np.testing.assert_allclose(client.compute(x.T.dot(x)).result(), ref.T @ ref)
    a = ha.arange(0, 100, chunks=10, backend="cpu")
    assert a.map_blocks(lambda b: b * 2).sum().compute() == 9900
    assert float(ha.full((10, 10), 3.0, chunks=5, backend="cpu")[::2, 1:].sum().compute()) == 135
    assert ha.zeros((4,), chunks=2, backend="cpu").compute().tolist() == [0, 0, 0, 0]
    f = ha.from_array(ref, chunks=(200, 20), backend="cpu")
    assert f.chunks == ((200, 200, 200), (20, 20)) and np.array_equal(f.compute(), ref)


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the error on a machine without a GPU")
def test_gpu_backend_without_gpu_says_what_to_do():
    with pytest.raises(ValueError, match=r"backend='gpu' for hpcgpu.array needs cupy.*backend='cpu'"):
        ha.ones((3,), backend="gpu")
    with pytest.raises(ValueError, match="hpcgpu.dataframe needs cudf"):
        hd.asgpu(hd.timeseries(end="2000-01-02", backend="cpu"))
    assert ha.backend_of(ha.ones(3)) == "numpy"  # auto falls back


def test_dataframe_operations_match_pandas(client, tmp_path):
    df = hd.timeseries(end="2000-01-04", freq="10s", seed=1, backend="cpu")
    pdf = df.compute()
    got = client.compute(df.groupby(["id", "name"]).agg({"x": ["sum", "mean"]})).result()
    pd.testing.assert_frame_equal(got.sort_index(), pdf.groupby(["id", "name"]).agg({"x": ["sum", "mean"]}).sort_index())
    other = hd.from_pandas(pd.DataFrame({"name": sorted(pdf.name.unique()), "n": range(pdf.name.nunique())}),
                           npartitions=2, backend="cpu")
    merged = client.compute(df.merge(other, on="name").n.sum()).result()
    assert merged == pdf.merge(other.compute(), on="name").n.sum()
    shuffled = df.shuffle("id").map_partitions(lambda p: p.id.nunique()).compute()
    assert shuffled.sum() == pdf.id.nunique()  # each id lives in exactly one partition
    rolled = df.map_partitions(lambda p: p.sort_values("id")[["x", "y"]].rolling(3).mean()).compute()
    assert len(rolled) == len(pdf)
    pdf.iloc[:1000].to_csv(tmp_path / "a.csv")
    pdf.iloc[:1000].to_parquet(tmp_path / "a.parquet")
    assert len(hd.read_csv(str(tmp_path / "a.csv"), backend="cpu")) == 1000
    assert hd.read_parquet(str(tmp_path / "a.parquet"), backend="cpu").x.sum().compute() == pytest.approx(pdf.iloc[:1000].x.sum())


@pytest.mark.gpu
def test_gpu_collections_round_trip_and_agree_with_cpu():
    import cupy

    cpu = ha.arange(0, 10_000, chunks=1000, backend="cpu", dtype="float64").reshape(100, 100)
    gpu = ha.asgpu(cpu)
    assert isinstance(gpu._meta, cupy.ndarray) and isinstance(gpu.blocks[0].compute(), cupy.ndarray)
    back = ha.ascpu((gpu * 2).T)
    np.testing.assert_array_equal(back.compute(), (cpu * 2).T.compute())
    x = ha.random.normal(10, 1, size=(4000, 4000), chunks=1000, seed=0, backend="gpu")
    a, b = x.compute(), x.compute()
    assert isinstance(a, cupy.ndarray) and bool((a == b).all())
    np.testing.assert_allclose(float(ha.ascpu(x).sum().compute()), float(a.sum()), rtol=1e-12)
    # arange is rank 2: compare the two real singular values; the rest are rounding noise
    np.testing.assert_allclose(ha.ascpu(da.linalg.svd(ha.asgpu(cpu[:, :50]))[1]).compute()[:2],
                               da.linalg.svd(cpu[:, :50])[1].compute()[:2], rtol=1e-8)


def test_philox_reference_gives_random123_known_answers():
    from philox_reference import philox4x32_10

    known = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for counter, key, answer in known:
        assert tuple(philox4x32_10(np.array([counter], dtype=np.uint32), key)[0]) == answer


@pytest.mark.parametrize("method,dtype", [("normal", "int64"), ("uniform", "float16"), ("integers", "float64"),
                                          ("normal", ">f8" if np.little_endian else "<f8")])
def test_random_rejects_a_dtype_it_cannot_draw_before_computing(method, dtype):
    make = {"normal": ha.random.normal, "uniform": ha.random.uniform,
            "integers": lambda **kw: ha.random.integers(5, **kw)}[method]
    shown = np.dtype(dtype).name if np.dtype(dtype).isnative else np.dtype(dtype).str
    with pytest.raises(TypeError, match=rf"{method}\(dtype='{shown}'\)"):
        make(size=(10,), chunks=5, dtype=dtype, seed=0, backend="cpu")


@pytest.mark.parametrize("low, high, dtype", [(5, 5, "int64"), (0, 257, "uint8"), (-1, 3, "uint16")])
def test_integers_rejects_an_empty_or_unrepresentable_range_before_computing(low, high, dtype):
    with pytest.raises(ValueError, match=rf"integers\(low={low}, high={high}, dtype='{dtype}'\)"):
        ha.random.integers(low, high, size=(10,), chunks=5, dtype=dtype, seed=0, backend="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("method,args,dtype,shape", [
    ("normal", (10.0, 2.0), "float64", (301, 7)),  # odd: the last counter's second value unused
    ("normal", (-1.0, 0.5), "float32", (3, 7, 11)),  # not a multiple of 4
    ("uniform", (2.0, 5.0), "float64", (999,)),
    ("uniform", (0.0, 1.0), "float32", (1001,)),
    ("integers", (-7, 1000), "int64", (999,)),
    ("integers", (0, 2**63 + 5), "uint64", (64,)),
    ("integers", (3, 200), "uint8", (77, 3)),
    ("integers", (-2**63, 2**63), "int64", (64,)),  # the whole range: low passed modulo 2**64
])
def test_gpu_philox_blocks_equal_the_numpy_transcription(method, args, dtype, shape):
    import cupy
    from philox_reference import block as reference

    from hpcgpu.array.philox import philox_block
    from hpcgpu.array.random import block_seed

    for block_id in [(0, 0), (3, 7)]:
        key = block_seed(5, block_id)
        got = cupy.asnumpy(philox_block(key, method, args, dtype, shape))
        assert got.dtype == np.dtype(dtype) and got.shape == shape
        want = reference(key, method, args, dtype, shape)
        if method == "integers":
            np.testing.assert_array_equal(got, want)
        else:  # the GPU's log/sincospi and NumPy's log/cos may differ in the last bits
            tight = dtype == "float64"
            np.testing.assert_allclose(got, want, rtol=1e-12 if tight else 2e-6, atol=1e-12 if tight else 2e-6)


@pytest.mark.gpu
def test_gpu_philox_blocks_are_the_same_on_every_device():
    import cupy

    from hpcgpu.array.philox import philox_block

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs in one process")
    blocks = []
    for device in (0, 1, 0):
        with cupy.cuda.Device(device):
            block = philox_block(11, "normal", (0.0, 1.0), "float64", (500, 300))
            assert block.device.id == device
            blocks.append(cupy.asnumpy(block))
    assert all((b == blocks[0]).all() for b in blocks)


@pytest.mark.gpu
def test_gpu_random_blocks_queue_without_waiting_for_the_gpu():
    import cupy

    from hpcgpu.array.philox import philox_block

    spin = cupy.RawKernel(r"""extern "C" __global__ void spin(long long cycles) {
        long long start = clock64(); while (clock64() - start < cycles) {} }""", "spin")
    stream = cupy.cuda.get_current_stream()
    philox_block(1, "normal", (0.0, 1.0), "float64", (10, 10))  # compile outside the window
    stream.synchronize()
    spin((1,), (1,), (np.int64(2_000_000_000),))  # about a second of GPU time
    blocks = [philox_block(key, "normal", (0.0, 1.0), "float64", (1000, 1000)) for key in range(20)]
    assert not stream.done, "making a block waited for the GPU"
    stream.synchronize()
    assert len({float(b[0, 0]) for b in blocks}) == 20


@pytest.mark.gpu
def test_gpu_dataframe_round_trip_and_groupby_agrees():
    pytest.importorskip("cudf")
    cpu = hd.timeseries(end="2000-01-03", seed=2, backend="cpu")
    gpu = hd.asgpu(cpu)
    assert hd.backend_of(gpu) == "cudf"
    agg = {"x": ["sum", "mean"]}
    got = hd.ascpu(gpu.groupby(["id", "name"]).agg(agg)).compute().sort_index()
    pd.testing.assert_frame_equal(got, cpu.groupby(["id", "name"]).agg(agg).compute().sort_index(),
                                  check_exact=False, rtol=1e-9)


def test_generated_trees_fuse_into_few_tasks_with_the_same_result(client):
    from hpcgpu.array.optimization import ArrayOptimizer

    x = ha.random.normal(10, 1, size=(320, 320), chunks=(10, 10), seed=3, backend="cpu")
    y = (x + 1)[::2, ::2].sum()
    assert isinstance(dask.config.get("array_optimize"), ArrayOptimizer)  # installed by the first hpcgpu array
    with dask.config.set({"hpcgpu.array.fuse-width": 0}):
        plain_tasks = len(dict(dask.optimize(y)[0].__dask_graph__()))
        reference = y.compute(scheduler="sync")
    fused_tasks = len(dict(dask.optimize(y)[0].__dask_graph__()))
    assert plain_tasks > 1300 and fused_tasks < plain_tasks // 10
    assert client.compute(y).result() == reference  # same blocks, same order of additions per block
    s = da.linalg.svd(ha.random.random((4000, 20), chunks=(10, 20), seed=1, backend="cpu"))[1]
    with dask.config.set({"hpcgpu.array.fuse-width": 0}):
        expected = s.compute()
    np.testing.assert_allclose(client.compute(s).result(), expected)


def _fused_chain(y):
    """The function names of the tasks the first fused task runs."""
    from hpcgpu.array.optimization import chain_tasks

    graph = dict(dask.optimize(y)[0].__dask_graph__())
    fused = next(t for t in graph.values() if not t.dependencies and getattr(t.func, "__name__", "") == "_run_fused")
    tasks = chain_tasks(fused.args[0].value.steps(), dask.config.get("hpcgpu.array.slice-pushdown", True))
    return [task.func for task in tasks]


def _names(funcs):
    return [getattr(func, "__name__", None) or func.func.__name__ for func in funcs]


@pytest.mark.parametrize("expr, moves", [
    (lambda x, z: (x + 1)[::2, ::2].sum(), True),
    (lambda x, z: ((x * 3 - 1) ** 2)[1::3, ::2].mean(), True),
    (lambda x, z: np.sin(x)[::2, 1::2].sum(), True),
    (lambda x, z: (x + z)[::2, ::2].sum(), False),  # two array operands: the slice stays
])
def test_slices_move_before_elementwise_operations_with_the_same_result(client, expr, moves):
    x = ha.random.normal(10, 1, size=(400, 400), chunks=(10, 10), seed=1, backend="cpu")
    z = ha.random.random((400, 400), chunks=(10, 10), seed=2, backend="cpu")
    y = expr(x, z)
    with dask.config.set({"hpcgpu.array.slice-pushdown": False}):
        reference = y.compute(scheduler="sync")
        kept = _fused_chain(y)
    moved = _fused_chain(y)
    assert client.compute(y).result() == reference  # elementwise: the same values, bit for bit
    after_slice = {chain[chain.index("getitem") + 1] for chain in (_names(kept), _names(moved))}
    if moves:  # Dask's order is operate, slice, reduce; hpcgpu's slice (a view), operate, reduce
        assert after_slice & {"add", "mul", "sin"} and len(after_slice) == 2, (kept, moved)
        assert operator.getitem in moved and operator.getitem not in kept
    else:
        assert moved == kept


@pytest.mark.parametrize("name, kwargs", [
    ("array-sum", dict(n=400, chunk=100)), ("svd", dict(rows=1000, cols=20, chunk=20)),
    ("groupby", dict(days=1, freq="60s")), ("rolling", dict(days=1, freq="60s")),
    ("many-fits", dict(rows=500, cols=5)), ("transpose-sum", dict(n=200, chunk=50)),
])
def test_every_reference_workload_runs_on_the_distributed_scheduler(client, name, kwargs):
    from hpcgpu.bench import reference as workloads

    timing = workloads.run(workloads.WORKLOADS[name](**kwargs, backend="cpu"), client)
    local = workloads.run(workloads.WORKLOADS[name](**kwargs, backend="cpu"))
    assert timing.seconds > 0 and timing.workload.nbytes > 0
    if name == "groupby":
        pd.testing.assert_frame_equal(timing.result.sort_index(), local.result.sort_index())
    else:
        np.testing.assert_allclose(np.asarray(timing.result, dtype=float), np.asarray(local.result, dtype=float))


@pytest.mark.parametrize("end, freq", [("2000-01-04", "40ms"), ("2000-01-31", "1s"), ("2000-01-08", "1s"),
                                       ("2000-02-01", "250ms")])
def test_gpu_sized_timeseries_partitions_keep_every_row(end, freq):
    import pandas as pd

    partition_freq = hd.gpu_partition_freq("2000-01-01", end, freq)
    df = hd.timeseries(end=end, freq=freq, partition_freq=partition_freq, backend="cpu")
    rows = int((pd.Timestamp(end) - pd.Timestamp("2000-01-01")) / pd.Timedelta(freq))
    assert df.npartitions == max(1, round(rows / hd.GPU_PARTITION_ROWS)) or rows % df.npartitions == 0
    assert df.divisions[-1] == pd.Timestamp(end) and len(df.index) == rows  # no tail dropped


def test_block_steps_pickle_and_build_the_block_dask_would():
    import pickle

    from dask.blockwise import optimize_blockwise

    from hpcgpu.array.lazy_blocks import BlockStep, build_blocks, lazy_graph

    def lazy(arr):
        keys = list(dask.core.flatten(arr.__dask_keys__()))
        return lazy_graph(optimize_blockwise(arr.__dask_graph__(), keys=keys))

    x = ha.random.normal(0, 1, size=(40, 40), chunks=10, seed=4, backend="cpu")
    y = x + 1  # generated then added: one block-local layer after blockwise fusion
    graph = lazy(y)
    assert all(isinstance(node, BlockStep) for node in graph.values()) and len(graph) == 16
    step = pickle.loads(pickle.dumps(graph[(y.name, 2, 1)]))
    np.testing.assert_array_equal(build_blocks([step])[step.key]({}), y.blocks[2, 1].compute())
    z = x + x.T  # output block (i, j) reads input blocks (i, j) and (j, i)
    step = pickle.loads(pickle.dumps(lazy(z)[(z.name, 1, 3)]))
    assert isinstance(step, BlockStep) and step.dependencies == ((x.name, 1, 3), (x.name, 3, 1))
    inputs = {(x.name, i, j): x.blocks[i, j].compute() for i, j in [(1, 3), (3, 1)]}
    np.testing.assert_array_equal(build_blocks([step])[step.key](inputs), z.blocks[1, 3].compute())


@pytest.mark.parametrize("reduction", ["sum", "std", "mean", "argmax", "max"])
def test_legacy_tree_nodes_build_on_the_worker_as_dask_converts_them(reduction):
    """A reduction tree's legacy tuples stay tuples until they run (LegacyStep): built,
    each is the node Dask's ``convert_legacy_graph`` makes, with the same dependencies."""
    import cloudpickle  # as distributed sends them: numpy's argmax is wrapped, pickle refuses it
    from dask._task_spec import convert_legacy_graph
    from dask.blockwise import optimize_blockwise

    from hpcgpu.array.lazy_blocks import LegacyStep, lazy_graph

    x = ha.random.normal(0, 1, size=(40, 30), chunks=(4, 3), seed=4, backend="cpu")
    y = getattr(x, reduction)(axis=0)
    keys = list(dask.core.flatten(y.__dask_keys__()))
    hlg = optimize_blockwise(y.__dask_graph__(), keys=keys)
    steps = [node for node in lazy_graph(hlg).values() if isinstance(node, LegacyStep)]
    assert len(steps) > 10
    want = convert_legacy_graph(dict(hlg))
    for step in steps:
        assert step.build() == want[step.key] and step.dependencies == want[step.key].dependencies
        sent = cloudpickle.loads(cloudpickle.dumps(step)).build()
        assert sent.key == step.key and sent.dependencies == step.dependencies


@settings(max_examples=60, deadline=None)
@given(source=st.sampled_from(["normal", "ones", "from_array", "arange"]),
       step=st.sampled_from(["add", "two_inputs", "block_id", "astype", "where", "transpose"]),
       chunks=st.sampled_from([(4, 3), (5, 5), (12, 1), (2, 7)]))
def test_blocks_built_on_the_worker_are_the_blocks_dask_builds(source, step, chunks):
    """build_blocks (one substitution per block) against Dask's own layer, over every kind
    of argument a block-local layer has: array inputs, constants, block indices (io_deps)."""
    from dask.blockwise import optimize_blockwise
    from dask.local import get_sync

    from hpcgpu.array.lazy_blocks import BlockStep, build_blocks, lazy_graph

    shape = (12, 10)
    x = {"normal": lambda: ha.random.normal(1, 2, size=shape, chunks=chunks, seed=5, backend="cpu"),
         "ones": lambda: ha.ones(shape, chunks=chunks, backend="cpu"),
         "from_array": lambda: da.from_array(np.arange(120.0).reshape(shape), chunks=chunks),
         "arange": lambda: da.arange(120.0, chunks=chunks[0] * 3).reshape(shape).rechunk(chunks)}[source]()
    y = {"add": lambda: x * 3 + 1,
         "two_inputs": lambda: x * 2 - ha.ones(shape, chunks=chunks, backend="cpu") / 4,
         "block_id": lambda: x.map_blocks(lambda b, block_id=None: b + block_id[0] - 10 * block_id[1],
                                          dtype=x.dtype),
         "astype": lambda: (x + 0.5).astype(np.float32),
         "where": lambda: da.where(x > 1, x, -x),
         "transpose": lambda: (x + 1).T - x.T / 2}[step]()  # x read twice: not fused into its reader
    keys = list(dask.core.flatten(y.__dask_keys__()))
    graph = lazy_graph(optimize_blockwise(y.__dask_graph__(), keys=keys))
    steps = [node for node in graph.values() if isinstance(node, BlockStep)]
    assert steps  # the layer under test is block-local
    graph.update(build_blocks(steps))
    got = get_sync(graph, keys)
    want = get_sync(dict(y.__dask_graph__()), keys)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_the_optimizer_pauses_garbage_collection_and_restores_it(monkeypatch):
    import gc

    from hpcgpu.array import optimization

    seen = []
    real = optimization.lazy_graph
    monkeypatch.setattr(optimization, "lazy_graph", lambda *args: seen.append(gc.isenabled()) or real(*args))
    y = (ha.random.normal(size=(320, 320), chunks=(10, 10), seed=3, backend="cpu") + 1).sum()
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            expected = float(y.compute(scheduler="sync"))
            assert gc.isenabled() is enabled  # as the caller had it
        finally:
            gc.enable()
        assert seen[-1] is False and np.isfinite(expected)
