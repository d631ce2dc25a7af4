"""The collective plane on a real distributed cluster (NumPy chunks, the comm transport):
results equal to the task path, irregular chunks and several dtypes, two operations in
flight, a stalled or dead worker makes the operation fail loudly within the timeout (and
computing again works), workers joining between operations, the path said in the log."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, wait

from hpcgpu.array import plane
from hpcgpu.array.plane.worker_side import state_of

DTYPES = ["float32", "float64", "complex128", "int64"]


@pytest.fixture(scope="module")
def client():
    # 3 s without progress: these workers share one process and one event loop, which a
    # loaded 2-core machine can leave without a turn for over a second
    with dask.config.set({"hpcgpu.array.plane.timeout": 3}), \
            LocalCluster(n_workers=3, threads_per_worker=2, processes=False,
                         dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _data(shape, chunks, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape) * 100
    x = (x + 1j * x[::-1]) if dtype.startswith("complex") else x
    return x.astype(dtype), da.from_array(x.astype(dtype), chunks=chunks)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rechunk_and_transpose_equal_the_task_path_exactly(client, dtype):
    xv, x = _data((37, 23), (5, (3, 7, 13)), dtype)
    y = plane.rechunk(x, ((20, 17), 4), method="collective")
    assert y.chunks == ((20, 17), (4, 4, 4, 4, 4, 3))
    assert np.array_equal(y.compute(), xv)
    assert np.array_equal(plane.transpose(x, method="collective").compute(), xv.T)
    assert np.array_equal(plane.transpose(x, (1, 0), method="collective").compute(),
                          plane.transpose(x, method="tasks").compute())


@pytest.mark.parametrize("dtype", ["float64", "complex128", "int64"])
def test_matmul_equals_the_task_path(client, dtype):
    av, a = _data((30, 21), (7, (5, 16)), dtype, seed=1)
    bv, b = _data((21, 11), ((5, 16), 4), dtype, seed=2)
    got = plane.matmul(a, b, method="collective").compute()
    want = plane.matmul(a, b, method="tasks").compute()
    assert np.allclose(got, want) and np.allclose(got, av @ bv)
    if dtype == "int64":
        assert np.array_equal(got, av @ bv)


def test_matmul_rechunks_a_mismatched_inner_axis(client):
    av, a = _data((12, 10), (4, 3), "float64")
    bv, b = _data((10, 6), (5, 2), "float64")
    assert np.allclose(plane.matmul(a, b, method="collective").compute(), av @ bv)


def test_two_operations_in_flight_finish(client):
    xv, x = _data((40, 40), 8, "float64")
    futures = [client.compute(plane.rechunk(x, (40, 2 + i), method="collective")) for i in range(3)]
    futures += [client.compute(plane.transpose(x + i, method="collective")) for i in range(3)]
    results = client.gather(futures)
    assert all(np.array_equal(r, xv) for r in results[:3])
    assert all(np.array_equal(r, (xv + i).T) for i, r in enumerate(results[3:]))


def test_auto_takes_the_plane_with_two_workers_and_says_so(client, caplog):
    with caplog.at_level(logging.INFO, logger="distributed.hpcgpu.plane"):
        assert plane.use_collective()
        xv, x = _data((20, 20), 5, "float64")
        assert np.array_equal(plane.rechunk(x, (20, 1)).compute(), xv)
    assert "rechunk: collective path" in caplog.text
    assert not plane.use_collective(None, "transpose")  # Dask's blockwise transpose pays more
    with dask.config.set({"hpcgpu.array.collective": "never"}):
        assert not plane.use_collective()


def test_dasks_own_matmul_rechunk_and_svd_of_hpcgpu_arrays_take_the_plane_under_auto(client):
    import hpcgpu.array as ha

    def last_kinds():
        return {h[0] for h in client.run(lambda dask_worker: state_of(dask_worker).history[-1:]
                                         and state_of(dask_worker).history[-1]).values() if h}

    av, bv = _data((30, 21), (7, (5, 16)), "float64", seed=1)[0], _data((21, 11), 4, "float64", seed=2)[0]
    a, b = ha.from_array(av, chunks=(7, (5, 16))), ha.from_array(bv, chunks=((5, 16), 4))
    assert np.allclose((a @ b).compute(), av @ bv) and last_kinds() == {"matmul"}
    client.run(lambda dask_worker: state_of(dask_worker).history.clear())
    assert np.allclose(a.dot(b).compute(), av @ bv) and last_kinds() == {"matmul"}
    y = a.rechunk((30, 3))
    assert np.array_equal(y.compute(), av) and y.chunks == ((30,), (3,) * 7) and last_kinds() == {"rechunk"}
    tall = ha.from_array(av, chunks=(3, 21))  # Dask's TSQR, its R factors by a TSQR of their own
    got, want = dask.compute(*da.linalg.svd(tall)), np.linalg.svd(av, full_matrices=False)
    assert np.allclose(got[1], want[1]) and np.allclose((got[0] * got[1]) @ got[2], av)
    assert last_kinds() == {"tsqr"}
    plain = da.from_array(2 * av, chunks=(7, (5, 16)))  # not an hpcgpu array: Dask's own graph
    client.run(lambda dask_worker: state_of(dask_worker).history.clear())
    with dask.config.set({"hpcgpu.array.collective": "never"}):
        assert np.allclose((a @ b).compute(), av @ bv)
    assert np.array_equal(plain.rechunk((30, 3)).compute(), 2 * av) and last_kinds() == set()


def test_auto_on_one_worker_takes_the_plane_for_matmul_only():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        assert plane.use_collective(None, "matmul")
        assert not plane.use_collective(None, "rechunk")


def test_without_a_cluster_the_graph_runs_as_a_group_of_one():
    xv, x = _data((20, 18), 6, "float32")
    y = plane.rechunk(x, (4, 18), method="collective")
    assert np.array_equal(y.compute(scheduler="threads"), xv)
    assert np.allclose(plane.matmul(x, x.T, method="collective").compute(scheduler="sync"), xv @ xv.T)


def _stall(seconds, dask_worker=None):
    state = state_of(dask_worker)
    run = state.run

    async def stalled(**msg):
        await asyncio.sleep(seconds)
        return await run(**msg)

    dask_worker.handlers["hpcgpu_plane_run"] = stalled
    return dask_worker.address


def _unstall(dask_worker):
    dask_worker.handlers["hpcgpu_plane_run"] = state_of(dask_worker).run


def test_a_stalled_worker_fails_the_operation_within_the_timeout_then_it_runs_again(client):
    xv, x = _data((30, 30), 6, "float64")
    x = x.persist()
    victim = list(client.scheduler_info()["workers"])[0]
    turn = client.run(lambda dask_worker: state_of(dask_worker).done_seq, workers=[victim])[victim]
    client.run(_stall, 10, workers=[victim])
    try:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="collective rechunk .* failed"):
            plane.rechunk(x, (30, 1), method="collective").compute()
        assert time.monotonic() - start < 9  # the peers give up after 3 s, long before 10
    finally:
        client.run(_unstall, workers=[victim])
    # the stalled call wakes, times out alone and gives its turn back: then the next runs
    deadline = time.monotonic() + 30
    while client.run(lambda dask_worker: state_of(dask_worker).done_seq, workers=[victim])[victim] < turn + 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert np.array_equal(plane.rechunk(x, (30, 2), method="collective").compute(), xv)


def test_workers_joining_and_leaving_between_operations(client):
    xv, x = _data((24, 24), 4, "float64")
    before = plane.rechunk(x, (24, 1), method="collective").compute()
    cluster = client.cluster
    cluster.scale(4)
    client.wait_for_workers(4)
    try:
        after = plane.transpose(x, method="collective").compute()
    finally:
        cluster.scale(3)
    assert np.array_equal(before, xv) and np.array_equal(after, xv.T)
    deadline = time.monotonic() + 30
    while len(client.scheduler_info()["workers"]) > 3:
        assert time.monotonic() < deadline, "the fourth worker did not leave"
        time.sleep(0.05)
    # matmul spreads over every running worker: the one that left is no rank of it
    assert np.allclose(plane.matmul(x, x, method="collective").compute(), xv @ xv)
    ranks = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][3])
    assert set(ranks.values()) == {3}, ranks


def _arm(flag: str, where: str, dask_worker=None) -> None:
    """The first worker asked to run a collective dies there (once in the cluster: ``flag``
    is the file that says it happened): ``where`` "anywhere", or only a worker that runs the
    barrier task ("with the barrier") or one that does not ("without the barrier")."""
    import os

    state_of(dask_worker)
    original = dask_worker.handlers["hpcgpu_plane_run"]

    async def run(**msg):
        here = any(str(ts.key).startswith("plane-barrier-") for ts in dask_worker.state.executing)
        if not os.path.exists(flag) and where in ("anywhere", ("without", "with")[here] + " the barrier"):
            open(flag, "w").close()
            os._exit(1)
        return await original(**msg)

    dask_worker.handlers["hpcgpu_plane_run"] = run


def _notice_deaths_late(dask_scheduler=None):
    """The scheduler removes a worker 1.5 s after its stream closed, as under load."""
    import asyncio

    original = dask_scheduler.remove_worker

    async def late(*args, **kwargs):
        await asyncio.sleep(1.5)
        return await original(*args, **kwargs)

    dask_scheduler.remove_worker = late
    dask_scheduler.handlers["unregister"] = late


@pytest.mark.parametrize("dies", ["without the barrier", "with the barrier", "spread only"])
def test_a_worker_process_that_dies_mid_collective_is_recomputed_without_it(dies, tmp_path):
    """The worker that dies holds input blocks while another runs the barrier task; or runs
    the barrier; or holds nothing (every task runs on the other, it only joins the spread
    group). The scheduler notices the death late, as under load: the barrier waits for it."""
    from hpcgpu import LocalGPUCluster

    # worker processes of their own (forked: hpcgpu's local path), so that one can die
    with dask.config.set({"hpcgpu.array.plane.timeout": 5}), \
            LocalGPUCluster(n_workers=2, gpus=[], threads_per_worker=1,
                            dashboard_address=None) as cluster, Client(cluster) as c:
        xv = np.arange(900.0).reshape(30, 30)
        x = da.from_array(xv, chunks=6)
        c.run_on_scheduler(_notice_deaths_late)
        victim, survivor = list(c.scheduler_info()["workers"])
        flag = str(tmp_path / "died")
        if dies == "spread only":
            c.run(_arm, flag, "anywhere", workers=[victim])
        else:
            c.run(_arm, flag, dies)
        where = {"workers": [survivor]} if dies == "spread only" else {}
        start = time.monotonic()
        # the barrier waits until the scheduler has removed the worker, then Dask runs it
        # again on the workers left, with the input blocks the dead one held recomputed
        got = c.compute(plane.rechunk(x, (30, 1), method="collective"), **where).result()
        assert os.path.exists(flag) and np.array_equal(got, xv)
        assert time.monotonic() - start < 15
        assert np.array_equal(plane.rechunk(x, (30, 1), method="collective").compute(), xv)


def test_out_of_memory_names_the_cause(monkeypatch):
    from hpcgpu.array.plane import ops

    original = ops.Rechunk.run

    def starved(self, ctx):  # the in-process workers share this module
        if ctx.rank == 0:
            raise MemoryError("Unable to allocate 1.00 GiB")
        return original(self, ctx)

    monkeypatch.setattr(ops.Rechunk, "run", starved)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        _, x = _data((12, 12), 4, "float64")
        with pytest.raises(Exception, match="out of memory on rank 0 while staging.*method='tasks'"):
            plane.rechunk(x, (12, 1), method="collective").compute()


def test_blocks_held_by_one_worker_are_multiplied_and_rechunked_by_all(client):
    workers = sorted(client.scheduler_info()["workers"])
    av, a = _data((36, 24), (6, 8), "float64", seed=4)
    a = client.persist(a, workers=workers[:1])  # every block on one worker
    assert np.allclose(plane.matmul(a, a.T.rechunk((8, 6)), method="collective").compute(), av @ av.T)
    ranks = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][3])
    assert set(ranks) == set(workers) and set(ranks.values()) == {len(workers)}, ranks
    assert np.array_equal(plane.rechunk(a, (36, 2), method="collective").compute(), av)


def test_a_persisted_input_is_put_by_one_task_per_worker_that_holds_it(client):
    av, a = _data((36, 24), (6, 8), "float64", seed=5)
    a = client.persist(a)
    wait(a)
    y = plane.matmul(a, a.T.rechunk((8, 6)), method="collective")
    put_tasks = [k for k in dict(y.__dask_graph__()) if isinstance(k, tuple) and str(k[0]).startswith("plane-put")]
    holders = {w for ws in client.who_has(a).values() for w in ws}
    # a's 12 blocks by one group task per worker that holds some (a.T.rechunk is not persisted)
    assert sum(str(k[0]).startswith("plane-putgroup") for k in put_tasks) == len(holders), put_tasks
    assert np.allclose(y.compute(), av @ av.T)


def test_a_sort_after_a_gather_runs_on_every_worker_that_holds_blocks():
    """``x.compute()`` leaves a copy of every block on the worker that joined them: the sort
    after it ran on that worker alone (a collective of one rank, seen on 2 x H200)."""
    v = np.random.default_rng(8).standard_normal(600)
    # no Active Memory Manager: it would drop the copies this test needs within 2 s
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        x = client.persist(da.from_array(v, chunks=60))
        wait(x)
        first = sorted(client.scheduler_info()["workers"])[0]  # each block's first holder by name
        assert np.array_equal(client.compute(x, workers=[first]).result(), v)  # joined on ``first``
        held = client.who_has(x)
        assert len({w for ws in held.values() for w in ws}) == 2 and max(map(len, held.values())) == 2, held
        assert np.array_equal(plane.sort(x, method="collective").compute(), np.sort(v))
        ranks = client.run(_last_ranks)  # None: the worker took no part
        assert set(ranks.values()) == {2}, ranks


def _last_ranks(dask_worker):
    plane_state = getattr(dask_worker, "_hpcgpu_plane", None)
    return plane_state.history[-1][3] if plane_state and plane_state.history else None


@pytest.mark.parametrize("kind", ["float-nan", "int-ties"])
def test_sort_and_argsort_on_three_workers_equal_numpy(client, kind):
    rng = np.random.default_rng(5)
    v = rng.integers(-50, 50, 997) if kind == "int-ties" else rng.standard_normal(997)
    if kind == "float-nan":
        v[::17] = np.nan
    x = client.persist(da.from_array(v, chunks=((100,) * 9 + (97,),)))
    got, order = dask.compute(plane.sort(x, method="collective"), plane.argsort(x, method="collective"))
    assert np.array_equal(got, np.sort(v), equal_nan=True)
    assert np.array_equal(order, np.argsort(v, kind="stable"))
    ranks = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][3])
    assert set(ranks.values()) == {3}, ranks  # one sample sort among all three holders
    m = rng.standard_normal((30, 41))
    xm = da.from_array(m, chunks=(7, 9))
    for axis in (0, 1):
        assert np.array_equal(plane.sort(xm, axis, method="collective").compute(), np.sort(m, axis))
        assert plane.sort(xm, axis, method="collective").chunks == xm.chunks


def test_sorts_and_a_rechunk_in_flight_keep_their_rounds_apart(client):
    xv, x = _data((400,), 40, "float64", seed=6)
    futures = [client.compute(plane.sort(x + i, method="collective")) for i in range(3)]
    futures.append(client.compute(plane.rechunk(x, 400, method="collective")))
    results = client.gather(futures)
    assert all(np.array_equal(r, np.sort(xv + i)) for i, r in enumerate(results[:3]))
    assert np.array_equal(results[3], xv)
    with dask.config.set({"hpcgpu.array.collective": "auto"}):
        assert plane.use_collective(None, "sort")


def test_tall_skinny_qr_and_svd_on_three_workers_equal_dasks(client):
    from hpcgpu.array import linalg

    xv, x = _data((600, 40), (50, 20), "float64", seed=7)
    x = client.persist(x)
    q, r = dask.compute(*linalg.qr(x, method="collective"))
    assert np.allclose(q @ r, xv) and np.allclose(q.T @ q, np.eye(40))
    ran = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][0])
    assert set(ran.values()) == {"tsqr"}, ran  # every holder took part (after the column merge)
    u, s, v = dask.compute(*linalg.svd(x, method="collective"))
    want_u, want_s, want_v = dask.compute(*da.linalg.svd(x.rechunk((50, 40))))
    assert np.allclose(s, want_s) and np.allclose(u, want_u) and np.allclose(v, want_v)
    client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history.clear())
    with dask.config.set({"hpcgpu.array.collective": "auto"}):  # the plane's one QR per worker
        assert np.allclose(linalg.svd(x)[1].compute(), want_s)
    ran = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][0])
    assert set(ran.values()) == {"tsqr"}, ran


def test_output_blocks_no_graph_reads_are_not_kept_on_the_workers(client):
    from hpcgpu.array import linalg

    xv, x = _data((60, 30), 10, "float64", seed=8)
    assert np.array_equal(plane.rechunk(x, (60, 3), method="collective")[:, :3].compute(), xv[:, :3])
    _, s, _ = linalg.svd(x.rechunk((10, 30)), method="collective")
    assert np.allclose(s.compute(), np.linalg.svd(xv, compute_uv=False))  # u and v not asked for
    left = client.run(lambda dask_worker: {t: len(o) for t, o in dask_worker._hpcgpu_plane.outputs.items()})
    assert not any(left.values()), left  # nor those of a failed operation (the stall test)


def test_workers_that_cannot_open_each_others_gpus_use_the_comm_and_are_told_once(client, caplog, monkeypatch):
    from hpcgpu.array.plane import worker_side
    from hpcgpu.array.plane.scheduler_side import PLUGIN_NAME, PlanePlugin

    xv, x = _data((20, 20), 5, "float64")
    plane.rechunk(x, (20, 2), method="collective").compute()
    installed = client.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.plugins[PLUGIN_NAME].installed))
    assert set(installed) == set(client.scheduler_info()["workers"]) and set(installed.values()) == {True}
    plugin = PlanePlugin()
    group = ["tcp://10.0.0.1:1", "tcp://10.0.0.1:2"]
    plugin.installed = {group[0]: True, group[1]: False}
    with caplog.at_level(logging.WARNING, logger="distributed.hpcgpu.plane"):
        assert [plugin._transport(group, gpu=True) for _ in range(3)] == ["comm"] * 3
    assert caplog.text.count("cannot open the host's other GPUs") == 1
    assert "allow-task-sharing" in caplog.text
    plugin.installed[group[1]] = True
    assert plugin._transport(group, gpu=True) == "nccl"
    assert plugin._transport(["tcp://10.0.0.1:1", "tcp://10.0.0.2:1"], gpu=True) == "comm"

    def refused(path, flags):
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(worker_side.os, "open", refused)
    assert worker_side.gpus_shared(["/dev/nvidia0"]) is False


def test_generated_blocks_fused_into_a_put_reach_the_plane_computed():
    """With fused kernels (every GPU run; here NumPy's, ``fused-kernels: True``) a put can
    run inside the task that draws its block, on the block's lazy form: the plane kept
    that form and its TSQR failed (``a fused block does not convert to a NumPy array``:
    ``hpcgpu demo``'s SVD on one H200). A put hands the plane the block's values."""
    import hpcgpu.array as ha

    from hpcgpu import LocalGPUCluster

    with dask.config.set({"hpcgpu.array.fused-kernels": True}), \
            LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster):
        x = ha.random.random((2000, 20), chunks=(20, 20), seed=0, backend="cpu").persist()
        s = ha.linalg.svd(x)[1].compute()
    expected = np.linalg.svd(ha.random.random((2000, 20), chunks=(20, 20), seed=0, backend="cpu").compute(),
                             compute_uv=False)
    assert np.allclose(s, expected)
