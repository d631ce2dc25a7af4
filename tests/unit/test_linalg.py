"""hpcgpu.array.linalg: Dask's TSQR on row blocks sized for the cluster, the same results.

Random tall-and-skinny and short-and-fat arrays in random chunkings: the singular values
and the factors agree with NumPy's, the row blocks are as many as :func:`row_blocks` says,
and anything TSQR cannot take goes to Dask unchanged.
"""

from __future__ import annotations

from unittest import mock

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hpcgpu.array as ha
from hpcgpu.array.linalg import row_blocks, tall_and_skinny


@st.composite
def matrices(draw):
    rows, cols = draw(st.integers(2, 300)), draw(st.integers(1, 12))
    if draw(st.booleans()):
        rows, cols = cols, rows  # short-and-fat
    data = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal((rows, cols))
    chunk = draw(st.integers(1, max(rows, cols)))
    along_rows = rows >= cols
    chunks = (chunk, cols) if along_rows else (rows, chunk)
    return data, da.from_array(data, chunks=chunks)


@settings(max_examples=60, deadline=None)
@given(matrix=matrices(), threads=st.integers(1, 8))
def test_svd_agrees_with_numpy_for_any_chunking(matrix, threads):
    data, x = matrix
    with mock.patch("hpcgpu.array.optimization.cluster_threads", lambda: threads):
        u, s, v = dask.compute(*ha.linalg.svd(x), scheduler="sync")
    np.testing.assert_allclose(s, np.linalg.svd(data, compute_uv=False), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((u * s) @ v, data, rtol=1e-8, atol=1e-8)


@settings(max_examples=40, deadline=None)
@given(matrix=matrices())
def test_qr_agrees_with_numpy_for_any_chunking(matrix):
    data, x = matrix
    q, r = dask.compute(*ha.linalg.qr(x), scheduler="sync")
    np.testing.assert_allclose(q @ r, data, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.abs(r), np.abs(np.linalg.qr(data)[1]), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("threads,max_block,blocks", [(1, "4GiB", 2), (4, "4GiB", 4), (1, "256MiB", 9),
                                                      (64, "4GiB", 64)])
def test_the_rows_are_split_for_the_threads_and_the_block_size(threads, max_block, blocks, monkeypatch):
    monkeypatch.setattr("hpcgpu.array.optimization.cluster_threads", lambda: threads)
    x = ha.random.random((300_000, 1000), chunks=(1000, 1000), seed=0, backend="cpu")
    with dask.config.set({"hpcgpu.array.linalg.max-block": max_block}):
        merged = tall_and_skinny(x)
    assert len(merged.chunks[0]) == blocks and merged.chunks[1] == (1000,)
    assert max(merged.chunks[0]) - min(merged.chunks[0]) <= 1  # nearly equal blocks
    assert row_blocks((5, 3), 8, threads=64, max_block=1) == 5  # never more blocks than rows


def test_a_one_dimensional_array_goes_to_dask_unchanged():
    with pytest.raises(ValueError, match="2D"):
        ha.linalg.svd(da.ones(10, chunks=5))


@pytest.mark.gpu
def test_gpu_svd_of_the_notebook_shape_matches_dasks_own():
    import cupy

    x = ha.random.random((30_000, 200), chunks=(1000, 200), seed=0, backend="gpu")
    ours = cupy.asnumpy(ha.linalg.svd(x)[1].compute())
    theirs = cupy.asnumpy(da.linalg.svd(x)[1].compute())
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
