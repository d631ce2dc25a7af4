"""The collective plane on GPUs of one host (marked ``gpu``): NCCL is the path, the data
stays CuPy, results equal the task path exactly for permutations, matmul matches, and a
worker that dies mid-exchange fails the operation within the timeout (then it runs again
on the workers left)."""

from __future__ import annotations

import os
import time

import dask
import dask.array
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")


def _gpus() -> int:
    return cupy.cuda.runtime.getDeviceCount()


@pytest.fixture(scope="module")
def client():
    from distributed import Client

    from hpcgpu import LocalGPUCluster

    if _gpus() < 2:
        pytest.skip("the plane's GPU tests need 2 GPUs or more")
    with dask.config.set({"hpcgpu.array.plane.timeout": 5}), \
            LocalGPUCluster(n_workers=min(_gpus(), 4), dashboard_address=None) as cl, \
            Client(cl) as c:
        yield c


def _plane_ops(client, run):
    """What each worker's plane recorded while ``run()`` ran: ``{worker: [(kind, token, path,
    ranks, seconds), ...]}`` for the workers that took part. A worker that held no block of the
    inputs takes no part (its GPU is not a rank), so earlier tests' placement decides how many
    workers appear; every rank of an operation (its token) must have recorded it."""

    def history(dask_worker, clear=False):
        plane = getattr(dask_worker, "_hpcgpu_plane", None)
        if plane is None:
            return []
        if clear:
            plane.history.clear()
        return list(plane.history)

    client.run(history, clear=True)
    out = run()
    ops = {w: h for w, h in client.run(history).items() if h}
    by_token = {}
    for h in ops.values():
        for _, token, _, ranks, _ in h:
            by_token.setdefault(token, []).append(ranks)
    assert by_token and all(len(r) == r[0] >= 2 and len(set(r)) == 1 for r in by_token.values()), ops
    return ops, out


def _x(shape, chunks, dtype="float64", seed=0):
    import hpcgpu.array as ha

    return ha.random.random(size=shape, chunks=chunks, seed=seed).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "int32"])
def test_rechunk_and_transpose_over_nccl_equal_the_task_path(client, dtype):
    from hpcgpu.array import plane

    x = _x((3000, 2000), (700, 600), dtype).persist()
    want = cupy.asnumpy(x.compute())
    y = plane.rechunk(x, (3000, 250), method="collective")
    got = y.compute()
    assert isinstance(got, cupy.ndarray) and np.array_equal(cupy.asnumpy(got), want)
    t = plane.transpose(x, method="collective").compute()
    assert np.array_equal(cupy.asnumpy(t), want.T)


def test_the_nccl_path_ran(client):
    from hpcgpu.array import plane

    x = _x((4000, 4000), (1000, 1000)).persist()
    ran, _ = _plane_ops(client, lambda: plane.rechunk(x, (4000, 500), method="collective").compute())
    assert {(h[0], h[2]) for hs in ran.values() for h in hs} == {("rechunk", "nccl")}, ran


def test_matmul_over_nccl(client):
    from hpcgpu.array import plane

    a = _x((4000, 3000), (1000, 1000), seed=1).persist()
    b = _x((3000, 2000), (1000, 1000), seed=2).persist()
    got = cupy.asnumpy(plane.matmul(a, b, method="collective").compute())
    want = cupy.asnumpy(a.compute()) @ cupy.asnumpy(b.compute())
    assert np.allclose(got, want)


def test_sort_and_argsort_over_nccl_equal_numpy(client):
    from hpcgpu.array import plane

    x = (_x((2_000_000,), 100_000, seed=3) * 1000).astype("int32").persist()  # many ties
    want = cupy.asnumpy(x.compute())
    ran, (got, order) = _plane_ops(
        client, lambda: dask.compute(plane.sort(x, method="collective"), plane.argsort(x, method="collective")))
    assert {(h[0], h[2]) for hs in ran.values() for h in hs} == {("sort", "nccl")}, ran
    assert isinstance(got, cupy.ndarray) and np.array_equal(cupy.asnumpy(got), np.sort(want))
    assert np.array_equal(cupy.asnumpy(order), np.argsort(want, kind="stable"))


def test_tall_skinny_svd_over_nccl_equals_dasks(client):
    from hpcgpu.array import linalg

    x = _x((200_000, 500), (25_000, 500), seed=4).persist()
    ran, (u, s, v) = _plane_ops(client, lambda: dask.compute(*linalg.svd(x, method="collective")))
    assert ("tsqr", "nccl") in {(h[0], h[2]) for hs in ran.values() for h in hs}, ran
    assert {h[2] for hs in ran.values() for h in hs} == {"nccl"}, ran
    want_u, want_s, want_v = dask.compute(*dask.array.linalg.svd(x))
    assert np.allclose(cupy.asnumpy(s), cupy.asnumpy(want_s))
    assert np.allclose(cupy.asnumpy(v), cupy.asnumpy(want_v), atol=1e-8)
    assert np.allclose(cupy.asnumpy(u), cupy.asnumpy(want_u), atol=1e-8)


def test_pieces_made_just_before_the_exchange_arrive_whole(client):
    """Blocks large enough that the kernels making the pieces (a transpose's copies, a
    sort's buckets, a QR's R) still run when the exchange starts: NCCL's stream must wait
    for them. On two H200 these sizes lost or mixed pieces before it did."""
    from hpcgpu.array import linalg, plane

    x = _x((8000, 8000), (2000, 2000), seed=5).persist()
    want = float((x + x.T).sum().compute())
    assert float((x + plane.transpose(x, method="collective")).sum().compute()) == pytest.approx(want, rel=1e-12)
    v = _x((2 ** 24,), 2 ** 21, seed=6).persist()
    y = cupy.asnumpy(plane.sort(v, method="collective").compute())
    assert np.array_equal(y, np.sort(cupy.asnumpy(v.compute())))
    a = _x((2_000_000, 100), (200_000, 100), seed=7).persist()
    _, s, _ = linalg.svd(a, method="collective")
    assert float((s ** 2).sum().compute()) == pytest.approx(float((a ** 2).sum().compute()), rel=1e-9)


def test_a_worker_killed_mid_exchange_fails_within_the_timeout_or_is_recomputed(client):
    from hpcgpu.array import plane
    from hpcgpu.array.plane.worker_side import state_of

    x = _x((4000, 4000), (1000, 1000)).persist()
    victim = sorted(client.scheduler_info()["workers"])[-1]
    before = len(client.scheduler_info()["workers"])

    def die(dask_worker=None):
        state = state_of(dask_worker)
        original = state._execute

        def execute(*args):
            os._exit(1)

        state._execute = execute
        return original is not None

    client.run(die, workers=[victim])
    start = time.monotonic()
    try:  # failed where the barrier's worker lives on; recomputed where it died with the victim
        got = plane.rechunk(x, (4000, 250), method="collective").compute()
    except Exception as error:  # noqa: BLE001 - the user's view of the failure
        assert "collective rechunk" in str(error) and "failed on" in str(error), error
    else:
        assert got.shape == (4000, 4000)
    assert time.monotonic() - start < 10
    deadline = time.monotonic() + 90
    while victim in client.scheduler_info()["workers"] or len(client.scheduler_info()["workers"]) < before:
        assert time.monotonic() < deadline, "the nanny did not bring a worker back"
        time.sleep(0.2)
    y = _x((2000, 2000), (500, 500), seed=3)
    assert np.array_equal(cupy.asnumpy(plane.rechunk(y, (2000, 100), method="collective").compute()),
                          cupy.asnumpy(y.compute()))
