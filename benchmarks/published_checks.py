"""Checks of each published step's result against NumPy/pandas (``published_code.py``,
``tests/gpu/test_published_code.py``). Random arrays are checked by their statistics
(hpcgpu's streams are not CuPy's) and, where small enough, against NumPy on the gathered
array; the dataframe, the fits and the gathered arrays exactly (to rounding)."""

from __future__ import annotations

import os

import numpy
from hpcgpu.system.workers import scheduler_workers


def _worker_state(cupy, dask_worker=None):
    name = getattr(cupy.cuda.get_allocator(), "__name__", repr(cupy.cuda.get_allocator()))
    data = getattr(dask_worker, "data", None)
    spilled = len(getattr(data, "host", None) or ()) + len(getattr(data, "disk", None) or ())
    return dict(allocator=name, spilled=spilled, store=type(data).__name__)


def check_cluster(client, s: dict, gpu: bool) -> str:
    workers = scheduler_workers(client)
    want = [g for g in s["gpus"].split(",") if g] if gpu else [None]
    assert len(workers) == len(want), f"{len(workers)} workers for CUDA_VISIBLE_DEVICES={s['gpus']!r}"
    if gpu:
        got = sorted(client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]).values())
        assert got == sorted(want), f"workers' first GPUs {got}, asked {want}"
    return f"{len(workers)} workers"


def check_allocator(client, cupy) -> str:
    names = {v["allocator"] for v in client.run(_worker_state, cupy).values()}
    assert names == {"rmm_cupy_allocator"}, f"workers' CuPy allocators: {names}"
    return "rmm_cupy_allocator on every worker"


def _uniform_sum_ok(total: float, size: int) -> None:
    sigma = (size / 12) ** 0.5
    assert abs(total - size / 2) < 10 * sigma, f"sum {total} of {size} uniforms: expected {size / 2} +- {10 * sigma}"


def check_persist(x, total, asnumpy, gather_limit: float) -> str:
    _uniform_sum_ok(float(total) / 2, x.size)
    if x.nbytes > gather_limit:
        return "statistics only (not gathered)"
    h = x.map_blocks(asnumpy, dtype=x.dtype).compute()
    numpy.testing.assert_allclose(float(total), numpy.sum(h + h.T), rtol=1e-9)
    return "equals NumPy's (x + x.T).sum() of the gathered array"


def check_spill(client, x, total, cupy, gpu: bool) -> str:
    _uniform_sum_ok(float(total), x.size)
    if not gpu:
        return "sum checked; no device limit on CPU"
    state = client.run(_worker_state, cupy)
    spilled = sum(v["spilled"] for v in state.values())
    assert spilled > 0, f"nothing spilled past device_memory_limit: {state}"
    return f"{spilled} chunks spilled to host"


def check_dataframe(df, means, rolled, window: int) -> str:
    pdf = df.compute(scheduler="sync")  # the same frame, by pandas in this process
    _pandas = lambda obj: obj.to_pandas() if hasattr(obj, "to_pandas") else obj  # noqa: E731 cuDF's or pandas'
    ref, got = pdf.groupby("name").x.mean().sort_index(), _pandas(means).sort_index()
    assert list(got.index) == list(ref.index), (list(got.index), list(ref.index))
    numpy.testing.assert_allclose(got.to_numpy(), ref.to_numpy(), rtol=1e-9)
    ref, got = pdf.x.rolling(window).mean(), _pandas(rolled)
    assert (got.index == ref.index).all() and len(got) == len(pdf)
    numpy.testing.assert_allclose(got.to_numpy(dtype=float, na_value=numpy.nan), ref.to_numpy(), rtol=1e-6,
                                  atol=1e-9, equal_nan=True)
    return f"groupby and rolling({window}) equal pandas' on {len(pdf)} rows"


def check_fits(fits, problem, s: dict) -> str:
    assert len(fits) == s["models"], len(fits)
    for i, coef in enumerate(fits):
        X, y = problem(numpy, i, s["rows"], s["features"])
        numpy.testing.assert_allclose(coef, numpy.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-7, atol=1e-9)
    return f"{len(fits)} fits equal NumPy's lstsq"


def check_blog(total, s: dict) -> str:
    m = ((s["blog_n"] + 1) // 2) ** 2  # elements of x[::2, ::2], each N(11, 1)
    assert abs(float(total) - 11 * m) < 10 * m**0.5, f"{float(total)} vs {11 * m} +- {10 * m ** 0.5}"
    return f"sum of {m} N(11,1) within 10 sigma"
