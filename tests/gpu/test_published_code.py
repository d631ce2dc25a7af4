"""Users' published GPU Dask code, run with one import changed (issue 30, item 5).

The code is ``benchmarks/published_steps.py``, as published; its sources are named there:
the RAPIDS multi-GPU notebook's steps (dask-cuda docs https://docs.rapids.ai/api/dask-cuda/
stable/examples/best-practices/ and .../stable/spilling/, RMM's README
https://github.com/rapidsai/rmm, dask-cuda's examples/ucx/local_cuda_cluster.py, the
gpu-python-tutorial's "8.0 Multi-GPU with Dask" notebook) and the Dask blog's "GPU Dask
Arrays, first steps" (https://blog.dask.org/2019/01/03/dask-array-gpus-first-steps).
``load_steps("hpcgpu")`` runs that text with only these lines switched, as a user would:

    from dask_cuda import LocalCUDACluster  ->  from hpcgpu import LocalGPUCluster as LocalCUDACluster
    import dask.array as da                 ->  import hpcgpu.array as da

Each step's result is checked against NumPy/pandas (``published_checks.py``) at the
sizes of ``published_code.SIZES["test"]`` (scaled down to stay short; each size says so).
The same steps are timed beside dask-cuda by ``benchmarks/published_code.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import published_checks as check  # noqa: E402
import published_code as pc  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def steps():
    return pc.load_steps("hpcgpu")


@pytest.fixture(scope="module")
def sizes():
    return pc.sizes_for("test")


@pytest.fixture(scope="module")
def session(steps, sizes):
    """The notebook's first cell; its workers import the checks' helpers by name."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(BENCHMARKS), os.environ.get("PYTHONPATH", "")]))
        cluster, client = steps.start_cluster(sizes)
        try:
            yield cluster, client
        finally:
            client.close()
            cluster.close()


def test_cluster_one_worker_per_gpu_named_in_cuda_visible_devices(session, sizes):
    check.check_cluster(session[1], sizes, gpu=True)


def test_client_run_sets_rmms_cupy_allocator_on_every_worker(session, steps):
    steps.set_allocator(session[1])
    check.check_allocator(session[1], steps.cupy)


def test_cupy_arrays_through_dask_array_persisted(session, steps, sizes):
    x, total = steps.persist_array(sizes)
    check.check_persist(x, total, steps.cupy.asnumpy, gather_limit=float("inf"))


def test_arrays_larger_than_device_memory_limit_spill_and_complete(session, steps, sizes):
    x, total = steps.spill_array(sizes)
    assert x.nbytes > 1e9  # device_memory_limit="1GB"
    check.check_spill(session[1], x, total, steps.cupy, gpu=True)


def test_dask_cudf_timeseries_groupby_and_rolling(session, steps, sizes):
    pytest.importorskip("cudf", reason="cuDF is not installed: the notebook's dask_cudf step needs it")
    pytest.importorskip("dask_cudf", reason="dask-cudf is not installed: the notebook's dask_cudf step needs it")
    df, means, rolled = steps.dataframe(sizes)
    check.check_dataframe(df, means, rolled, sizes["window"])


def test_many_small_model_fits_through_dask_delayed(session, steps, sizes):
    check.check_fits(steps.model_fits(sizes), steps.problem, sizes)


def test_the_2019_blog_code(session, steps, sizes):
    check.check_blog(steps.blog(sizes), sizes)
