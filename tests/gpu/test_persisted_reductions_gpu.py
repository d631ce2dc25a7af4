"""Reductions over a persisted CuPy array on a LocalGPUCluster (marked ``gpu``): the fused
packs batch each reduction's chunk step over small blocks (hpcgpu.array.chunkbatch) and the
final task collapses Dask's combine tree (hpcgpu.array.treecollapse); the results are
NumPy's on the same values, and the blocks stay CuPy arrays."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, wait

import hpcgpu.array as ha
from hpcgpu import LocalGPUCluster

pytestmark = pytest.mark.gpu

CASES = [("mean", None), ("std", None), ("var", (0, 1)), ("sum", 0), ("max", None), ("min", 1), ("prod", None)]


@pytest.fixture(scope="module")
def client():
    with LocalGPUCluster(n_workers=1) as cluster, Client(cluster) as client:
        yield client


def test_reductions_over_2500_small_persisted_cupy_blocks_are_numpys(client):
    import cupy

    x = ha.random.normal(1, 0.01, size=(400, 400), chunks=(8, 8), seed=3, backend="gpu")
    x = client.persist(x)
    wait(x)
    host = cupy.asnumpy(x.compute())
    kinds = client.run(lambda dask_worker: {type(v).__module__.split(".")[0] for v in dask_worker.data.values()})
    assert set().union(*kinds.values()) == {"cupy"}
    for name, axis in CASES:
        got = getattr(x, name)(axis=axis).compute()
        assert isinstance(got, cupy.ndarray), name
        np.testing.assert_allclose(cupy.asnumpy(got), getattr(np, name)(host, axis=axis), rtol=1e-9, err_msg=name)
