"""Dask's idiomatic CuPy random code, with only ``import hpcgpu.array as da`` changed, on
hpcgpu's fused GPU generators (marked ``gpu``: the lead runs them on a lent GPU machine).

The code of the 2019 blog post "GPU Dask Arrays, first steps", at small sizes: the random
layer must be hpcgpu's (RandomBlocks), the blocks must be drawn lazily inside the fused
step (hpcgpu's fused path, not a CuPy generator per block), the values must be those of
hpcgpu's own API with the object's seed, and the sum must be sane.
"""

from __future__ import annotations

import dask
import dask.array
import numpy as np
import pytest

import hpcgpu.array as da  # the one changed line
from hpcgpu.array import draw as hrandom  # where a random block is made
from hpcgpu.array.random import RandomBlocks

pytestmark = pytest.mark.gpu

SIZE, CHUNKS = (4096, 4096), (256, 256)  # 256 blocks: enough leaves for fused tasks


def _random_layer(x) -> bool:
    layer = x.dask.layers[x.name]
    return any(isinstance(dep, RandomBlocks) for dep in getattr(layer, "io_deps", {}).values())


@pytest.fixture
def lazy_draws(monkeypatch):
    """Per draw of random blocks: whether it was lazy, inside a fused step (hpcgpu's fused
    path; a batch of alike blocks is one draw)."""
    drawn = []
    original = hrandom.lazy_random_block

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        drawn.append(out is not None)
        return out

    monkeypatch.setattr(hrandom, "lazy_random_block", spy)
    return drawn


def _expected_seed(seed: int) -> int:
    return int(np.random.RandomState(seed).randint(0, 2**63 - 1, dtype=np.int64))


def _sane(total) -> None:
    n = SIZE[0] // 2 * SIZE[1] // 2
    assert abs(float(total) - 11 * n) < 6 * np.sqrt(n)  # mean 11, sd 1 per element: 6 sigma


def test_blog_code_randomstate_runs_on_hpcgpus_fused_path(lazy_draws):
    import cupy

    rs = da.random.RandomState(42, RandomState=cupy.random.RandomState)
    x = rs.normal(10, 1, size=SIZE, chunks=CHUNKS)
    assert _random_layer(x) and type(x._meta).__module__.startswith("cupy")
    with dask.config.set(scheduler="sync"):
        total = (x + 1)[::2, ::2].sum().compute()
    _sane(total)
    assert lazy_draws and all(lazy_draws)  # every block drawn inside a fused step
    own = da.random.normal(10, 1, size=SIZE, chunks=CHUNKS, seed=_expected_seed(42), backend="gpu")
    with dask.config.set(scheduler="sync"):
        assert float(total) == pytest.approx(float((own + 1)[::2, ::2].sum().compute()), rel=1e-12)


def test_default_rng_of_a_cupy_generator_runs_on_hpcgpus_fused_path(lazy_draws):
    import cupy

    rng = da.random.default_rng(cupy.random.default_rng(42))
    x = rng.normal(10, 1, size=SIZE, chunks=CHUNKS)
    assert rng.fused_backend == "cupy" and _random_layer(x)
    with dask.config.set(scheduler="sync"):
        _sane((x + 1)[::2, ::2].sum().compute())
    assert lazy_draws and all(lazy_draws)  # every block drawn inside a fused step
    u = rng.random(size=(1000, 1000), chunks=(250, 250)).compute()
    assert isinstance(u, cupy.ndarray) and 0 <= float(u.min()) and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.005


def test_the_cupy_array_backend_switch_runs_on_hpcgpus_fused_path(lazy_draws):
    with dask.config.set({"array.backend": "cupy"}):
        rs = da.random.RandomState(7)
        x = rs.normal(10, 1, size=SIZE, chunks=CHUNKS)
        y = da.random.normal(10, 1, size=SIZE, chunks=CHUNKS)
    assert rs.fused_backend == "cupy" and _random_layer(x) and _random_layer(y)
    assert type(y._meta).__module__.startswith("cupy")
    with dask.config.set(scheduler="sync"):
        _sane((x + 1)[::2, ::2].sum().compute())
    assert lazy_draws and all(lazy_draws)  # every block drawn inside a fused step


def test_plain_dask_array_code_is_left_as_it_is():
    import cupy

    rs = dask.array.random.RandomState(42, RandomState=cupy.random.RandomState)
    x = rs.normal(10, 1, size=(1000, 1000), chunks=(250, 250))
    assert not _random_layer(x) and type(rs) is dask.array.random.RandomState
    assert abs(float((x + 1)[::2, ::2].sum().compute()) - 11 * 250_000) < 6 * 500
