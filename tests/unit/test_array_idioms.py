"""hpcgpu.array as a superset of dask.array, and Dask's idiomatic random generators on
hpcgpu's fused path (the dispatch, on the CPU; tests/gpu/test_array_idioms_gpu.py runs CuPy)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

import dask
import dask.array as da

import hpcgpu.array as ha
import hpcgpu.dataframe as hd
from hpcgpu.array import rng
from hpcgpu.array.random import RandomBlocks

SUBMODULES = ["random", "linalg", "fft", "ma", "stats", "overlap", "image", "gufunc", "utils",
              "lib", "lib.stride_tricks", "creation"]
#: names whose hpcgpu object is not Dask's, on purpose (hpcgpu's faster path or a subclass)
OWN = {"": {"ones", "zeros", "full", "empty", "arange", "from_array", "random", "linalg", "fft", "ma",
            "stats", "overlap", "image", "gufunc", "utils", "lib", "optimization", "creation",
            "rechunk", "transpose", "matmul"},
       "random": {"normal", "standard_normal", "uniform", "random", "random_sample", "seed",
                  "RandomState", "Generator", "default_rng"},
       "linalg": {"qr", "svd"}, "lib": {"stride_tricks"},
       "creation": {"ones", "zeros", "full", "empty", "arange", "from_array"}}


def _public(module) -> set[str]:
    return {n for n in getattr(module, "__all__", dir(module)) if not n.startswith("_")}


@pytest.mark.parametrize("sub", [""] + SUBMODULES)
def test_every_public_name_of_dask_array_is_there(sub):
    theirs = importlib.import_module("dask.array" + (f".{sub}" if sub else ""))
    ours = importlib.import_module("hpcgpu.array" + (f".{sub}" if sub else ""))
    names = _public(theirs) - {"annotations"}
    assert names and names <= set(dir(ours))
    other = {n for n in names if getattr(ours, n) is not getattr(theirs, n)}
    assert other <= OWN.get(sub, set()), sorted(other - OWN.get(sub, set()))
    assert set(ours.__all__) >= names - {"annotations"}


def test_dataframe_namespace_is_a_superset():
    import dask.dataframe as dd

    names = _public(dd)
    assert all(getattr(hd, n) is getattr(dd, n) for n in names - {"from_pandas", "read_csv", "read_parquet"})
    assert names <= set(dir(hd))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        hd.no_such_name


def test_missing_names_still_raise_attribute_error():
    with pytest.raises(AttributeError, match="hpcgpu.array.*no_such_name"):
        ha.no_such_name
    assert not hasattr(ha.random, "__wrapped__")  # dunders are not Dask's module's


def test_importing_hpcgpu_array_leaves_dask_array_as_it_was():
    code = (
        "import dask.array as da, dask.array.random as dr, dask.array.linalg as dl, dask.array.creation as dc\n"
        "mods = (da, dr, dl, dc)\n"
        "before = [dict(vars(m)) for m in mods]\n"
        "import hpcgpu.array as ha\n"
        "changed = [(m.__name__, k) for m, b in zip(mods, before) for k, v in vars(m).items()\n"
        "           if k in b and b[k] is not v]\n"
        "assert not changed, changed\n"
        "assert type(da.random.default_rng(0)) is dr.Generator\n"
        "assert type(da.random.RandomState(0)) is dr.RandomState\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_dask_signatures_work_and_give_dask_arrays():
    x = ha.ones((4, 6), dtype="f4", chunks=(2, 3), name="ones-idioms")  # dask's keywords
    assert isinstance(x, da.Array) and x.dtype == np.float32 and x.chunks == ((2, 2), (3, 3))
    same = ha.ones((4, 6), "f4", (2, 3)), da.ones((4, 6), "f4", (2, 3))  # what Dask makes of it
    assert (same[0].dtype, same[0].chunks) == (same[1].dtype, same[1].chunks)
    assert ha.full((2, 2), 3, chunks=1).sum().compute() == 12
    assert ha.arange(5, chunks=2, like=np.empty(0)).sum().compute() == 10
    y = ha.random.random((10, 4), (5, 2))  # dask's positional chunks
    assert y.chunks == ((5, 5), (2, 2)) and ha.random.random_sample(3).compute().shape == (3,)
    assert ha.random.normal(0, 1).compute().shape == ()  # size=None: Dask's 0-d draw


def test_seed_reproduces_calls_without_seed():
    ha.random.seed(123)
    a, p = ha.random.normal(size=10, chunks=5), ha.random.poisson(3, size=10, chunks=5)
    b = ha.random.normal(size=10, chunks=5)
    ha.random.seed(123)
    assert np.array_equal(a.compute(), ha.random.normal(size=10, chunks=5).compute())
    assert np.array_equal(p.compute(), ha.random.poisson(3, size=10, chunks=5).compute())
    assert not np.array_equal(a.compute(), b.compute())


def test_cupy_generators_are_recognised_by_module_name_without_cupy():
    RS = type("RandomState", (), {"__module__": "cupy.random._generator"})
    Bits = type("XORWOW", (), {"__module__": "cupy.random._bit_generator"})
    assert rng.fused_backend(RS) == "cupy" and rng.fused_backend(Bits()) == "cupy"
    assert ha.random.RandomState(RandomState=RS).fused_backend == "cupy"
    assert ha.random.Generator(Bits()).fused_backend == "cupy"
    assert rng.fused_backend(np.random.RandomState) is None
    assert ha.random.default_rng(np.random.default_rng(0)).fused_backend is None
    assert "cupy" not in sys.modules or sys.modules["cupy"] is not None


def _random_layer(x) -> bool:
    layer = x.dask.layers[x.name]
    return any(isinstance(dep, RandomBlocks) for dep in getattr(layer, "io_deps", {}).values())


def test_numpy_generators_stay_on_dasks_path():
    rs = ha.random.RandomState(42)
    x = rs.normal(10, 1, size=(60, 60), chunks=(20, 20))
    assert not _random_layer(x)
    assert np.array_equal(x.compute(), da.random.RandomState(42).normal(10, 1, size=(60, 60), chunks=(20, 20)).compute())
    g = ha.random.default_rng(5).random(size=50, chunks=10)
    assert not _random_layer(g)
    assert np.array_equal(g.compute(), da.random.default_rng(5).random(size=50, chunks=10).compute())


@pytest.fixture
def numpy_fused(monkeypatch):
    """NumPy's generators mapped to hpcgpu's NumPy backend, as CuPy's are to its GPU one."""
    monkeypatch.setitem(rng.FUSED_LIBRARIES, "numpy", "numpy")


def _expected_seed(seed: int) -> int:
    return int(np.random.RandomState(seed).randint(0, 2**63 - 1, dtype=np.int64))


def test_blog_code_takes_hpcgpus_path_when_the_backend_applies(numpy_fused):
    rs = ha.random.RandomState(42, RandomState=np.random.RandomState)
    x = rs.normal(10, 1, size=(400, 300), chunks=(100, 100))
    assert _random_layer(x) and rs.fused_backend == "numpy"
    own = ha.random.normal(10, 1, size=(400, 300), chunks=(100, 100), seed=_expected_seed(42), backend="cpu")
    assert np.array_equal(x.compute(), own.compute())  # hpcgpu's stream, the object's seed
    total = float((x + 1)[::2, ::2].sum().compute())
    assert abs(total - 11 * 200 * 150) < 6 * np.sqrt(200 * 150)  # 6 sigma
    values = x.compute()
    assert abs(values.mean() - 10) < 0.03 and abs(values.std() - 1) < 0.03
    again = ha.random.RandomState(42, RandomState=np.random.RandomState)
    assert np.array_equal(again.normal(10, 1, size=(400, 300), chunks=(100, 100)).compute(), values)
    assert not np.array_equal(rs.normal(10, 1, size=(400, 300), chunks=(100, 100)).compute(), values)


def test_blog_code_reaches_the_fused_kernels(numpy_fused, monkeypatch):
    from hpcgpu.array import draw as hrandom  # where a random block is made

    drawn = []
    original = hrandom.lazy_random_block
    monkeypatch.setattr(hrandom, "lazy_random_block", lambda *a: drawn.append(original(*a)) or drawn[-1])
    rs = ha.random.RandomState(42, RandomState=np.random.RandomState)
    x = rs.normal(10, 1, size=(64, 64), chunks=(4, 4))  # 256 blocks: fused tasks
    with dask.config.set({"hpcgpu.array.fused-kernels": True, "scheduler": "sync"}):
        total = (x + 1)[::2, ::2].sum().compute()
    assert drawn and all(d is not None for d in drawn)  # each draw lazy, inside a fused step
    assert abs(total - 11 * 32 * 32) < 6 * 32


def test_other_randomstate_methods_match_numpys_statistics(numpy_fused):
    rs = ha.random.RandomState(1, RandomState=np.random.RandomState)
    u, s = rs.uniform(2, 5, size=20000, chunks=5000), rs.random_sample(size=20000, chunks=5000)
    n, i = rs.standard_normal(size=20000, chunks=5000), rs.randint(3, 9, size=20000, chunks=5000)
    assert all(map(_random_layer, (u, s, n, i)))
    u, s, n, i = dask.compute(u, s, n, i)
    assert 2 <= u.min() and u.max() < 5 and abs(u.mean() - 3.5) < 0.05
    assert 0 <= s.min() and s.max() < 1 and abs(s.var() - 1 / 12) < 0.005
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    assert set(np.unique(i)) == set(range(3, 9)) and i.dtype == np.dtype("l")
    # what hpcgpu's kernels do not draw stays Dask's: array parameters, other distributions
    assert not _random_layer(rs.normal(np.zeros(4), 1, size=4, chunks=2))
    assert not _random_layer(rs.poisson(3, size=10, chunks=5))


def test_default_rng_of_a_generator_takes_hpcgpus_path(numpy_fused):
    g = ha.random.default_rng(np.random.default_rng(3))
    assert isinstance(g, da.random.Generator) and g.fused_backend == "numpy"
    x, y = g.normal(10, 1, size=(300, 300), chunks=100), g.random(size=(300, 300), chunks=100)
    f, k = g.random(size=1000, chunks=500, dtype="float32"), g.integers(0, 4, size=1000, chunks=500)
    assert all(map(_random_layer, (x, y, f, k)))
    x, y, f, k = dask.compute(x, y, f, k)
    assert abs(x.mean() - 10) < 0.03 and abs(y.mean() - 0.5) < 0.01 and f.dtype == np.float32
    assert set(np.unique(k)) == {0, 1, 2, 3}
    same = ha.random.default_rng(np.random.default_rng(3)).normal(10, 1, size=(300, 300), chunks=100)
    assert np.array_equal(same.compute(), x)  # seeded: repeats
    assert not _random_layer(g.integers(0, 4, size=10, chunks=5, endpoint=True))


def test_dasks_cupy_backend_switch_picks_hpcgpus_gpu_kernels():
    from hpcgpu.array.random import _backend_of_call

    with dask.config.set({"array.backend": "cupy"}):
        assert _backend_of_call(None) == "cupy" and _backend_of_call("cpu") == "cpu"
    assert _backend_of_call(None) is None
