"""Random arrays whose values depend on the seed and the block, never on placement.

Each block draws from its own counter-based Philox generator, keyed from
``SeedSequence(seed, spawn_key=block index)``: the same seed and chunks give the same
array whichever worker computes which block, in whatever order. On a GPU the block is
made by one CUDA kernel that evaluates Philox4x32-10 at each element's counter
(:mod:`hpcgpu.array.philox`): no generator state, no set-up, nothing that waits for the
GPU, so a worker queues its blocks back to back. On the CPU the block is made by NumPy's
``Philox``. The two streams differ: a seed reproduces an array per backend.

The module is a superset of :mod:`dask.array.random`: these functions take Dask's
arguments too (``normal(loc, scale, size, chunks)``, ``random_sample``); without
``seed=`` they take one from this module's global state, which :func:`seed` sets (it
seeds Dask's too, for the distributions that are Dask's own here). ``RandomState``,
``Generator`` and ``default_rng`` are Dask's, drawing with these kernels when CuPy backs
them (:mod:`hpcgpu.array.rng`); every other name is Dask's own object.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

import dask
import dask.array as da
import dask.array.random as _dask_random
from dask.array.core import normalize_chunks
from dask.blockwise import blockwise
from dask.layers import ArrayBlockIdDep

from hpcgpu.array.fused.runner import lazy_random_block
from hpcgpu.array.optimization import mark
from hpcgpu.array.philox import philox_block
from hpcgpu.array.rng import Generator, RandomState, default_rng
from hpcgpu.backends import resolve_backend
from hpcgpu.reexport import fallback

__all__ = ["normal", "standard_normal", "random", "random_sample", "uniform", "integers", "seed",
           "block_seed", "block_seeds", "RandomBlocks", "RandomState", "Generator", "default_rng"]
# every other distribution (poisson, choice, permutation, ...): Dask's own
__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.array.random")

_STATE = np.random.RandomState()  # seeds of calls without seed=; seed() sets it
_STATE_LOCK = threading.Lock()


def seed(seed=None) -> None:
    """Seed the arrays of later calls without ``seed=``: this module's and Dask's.

    Examples
    --------
    >>> seed(7); a = normal(size=4, chunks=2, backend="cpu")
    >>> seed(7); b = normal(size=4, chunks=2, backend="cpu")
    >>> bool((a == b).all().compute())
    True
    """
    with _STATE_LOCK:
        _STATE.seed(seed)
    _dask_random.seed(seed)


def _seed_of_call(seed):
    if seed is not None:
        return seed
    with _STATE_LOCK:
        return int(_STATE.randint(0, 2**63 - 1, dtype=np.int64))


def _backend_of_call(backend):
    # within hpcgpu.array, Dask's own switch to CuPy chunks also picks the GPU kernels
    if backend is None and dask.config.get("array.backend", "numpy") == "cupy":
        return "cupy"
    return backend


class RandomBlocks(ArrayBlockIdDep):
    """The block index of a random array's block, as its generator takes it.

    Dask's own ``ArrayBlockIdDep``, under a name of hpcgpu's: a block-local layer whose
    only per-block input is this makes the same expression for every block of one shape,
    up to the blocks' keys (:mod:`hpcgpu.array.fused.batch` records it once for all).
    """

    def block_shape(self, idx: tuple) -> tuple:
        """The shape of block ``idx``.

        Examples
        --------
        >>> RandomBlocks(((3, 3, 2), (4,))).block_shape((2, 0))
        (2, 4)
        """
        return tuple(chunk[i] for i, chunk in zip(idx, self.chunks))


def block_seed(seed: int, block_id: tuple[int, ...]) -> int:
    """The 64-bit key of one block, from the array's seed and the block's index.

    Examples
    --------
    >>> block_seed(42, (0, 1)) == block_seed(42, (0, 1)) != block_seed(42, (1, 0))
    True
    """
    state = np.random.SeedSequence(seed, spawn_key=tuple(block_id)).generate_state(1, np.uint64)
    return int(state[0])


# NumPy's SeedSequence constants (numpy/random/bit_generator.pyx)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _MASK = 0xCA01F9DD, 0x4973F715, 0xFFFFFFFF


def block_seeds(seed: int, block_ids) -> np.ndarray:
    """:func:`block_seed` of many blocks of one array at once (NumPy's SeedSequence
    arithmetic on arrays of 32-bit words, one element per block).

    Examples
    --------
    >>> ids = [(0, 0), (0, 1), (7, 3)]
    >>> block_seeds(42, ids).tolist() == [block_seed(42, b) for b in ids]
    True
    """
    ids = np.asarray(block_ids, dtype=np.int64).reshape(len(block_ids), -1)
    if ids.size and (ids.min() < 0 or ids.max() >= 2**32):  # such indices take 2 words: NumPy's own way
        return np.array([block_seed(seed, tuple(b)) for b in ids.tolist()], dtype=np.uint64)
    run = [int(w) for w in np.random.bit_generator._coerce_to_uint32_array(seed)]
    if ids.shape[1] and len(run) < 4:
        run += [0] * (4 - len(run))
    n = len(ids)
    entropy = [np.full(n, w, dtype=np.uint32) for w in run] + [ids[:, d].astype(np.uint32) for d in range(ids.shape[1])]
    mult = _INIT_A

    def hashmix(value):
        nonlocal mult
        value = value ^ np.uint32(mult)
        mult = mult * _MULT_A & _MASK
        value = value * np.uint32(mult)
        return value ^ (value >> np.uint32(16))

    def mix(x, y):
        result = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return result ^ (result >> np.uint32(16))

    with np.errstate(over="ignore"):
        pool = [hashmix(entropy[i] if i < len(entropy) else np.zeros(n, np.uint32)) for i in range(4)]
        for src in range(4):
            for dst in range(4):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for src in range(4, len(entropy)):
            for dst in range(4):
                pool[dst] = mix(pool[dst], hashmix(entropy[src]))
        words, mult = [], _INIT_B
        for i in range(2):  # generate_state(1, uint64): two words, little end first
            value = pool[i] ^ np.uint32(mult)
            mult = mult * _MULT_B & _MASK
            value = value * np.uint32(mult)
            words.append(value ^ (value >> np.uint32(16)))
    return words[0].astype(np.uint64) | (words[1].astype(np.uint64) << np.uint64(32))


def _block(backend, seed, method, args, dtype, shape, block_id=None):
    key = block_seed(seed, block_id)
    if backend == "cupy":
        return philox_block(key, method, args, dtype, shape)
    gen = np.random.Generator(np.random.Philox(key))
    if method == "normal":
        loc, scale = args
        out = gen.standard_normal(size=shape, dtype=dtype)
        if scale != 1:
            out *= scale  # in place: no second chunk-sized allocation
        if loc != 0:
            out += loc
        return out
    if method == "uniform":
        low, high = args
        out = gen.random(size=shape, dtype=dtype)
        if (low, high) != (0.0, 1.0):
            out *= high - low
            out += low
        return out
    low, high = args
    return gen.integers(low, high, size=shape, dtype=dtype)


def _check_dtype(method: str, dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    wanted = ("i", "u") if method == "integers" else ("f",)
    if (dtype.kind not in wanted or dtype.itemsize > 8 or (dtype.kind == "f" and dtype.itemsize < 4)
            or not dtype.isnative):
        hint = "an integer dtype such as 'int64'" if method == "integers" else "'float64' or 'float32'"
        shown = dtype.name if dtype.isnative else dtype.str
        raise TypeError(f"{method}(dtype={shown!r}): use {hint}, in this machine's byte order")
    return dtype


def _make(method, args, size, chunks, dtype, seed, backend) -> da.Array:
    dtype = _check_dtype(method, dtype)
    backend = resolve_backend("array", _backend_of_call(backend))
    seed = _seed_of_call(seed)
    shape = (int(size),) if np.ndim(size) == 0 else tuple(int(n) for n in size)
    chunks = normalize_chunks(chunks, shape, dtype=dtype)
    xp = __import__(backend)
    # the constants travel inside one partial of a module-level function: Dask substitutes
    # each positional argument into every block's task, which costs far more than the
    # block's GPU work for a nested ``chunks`` tuple; one shared partial pickles once
    make = functools.partial(_make_block, backend, seed, method, args, dtype.str, chunks)
    name = f"{method}-{da.core.tokenize(method, args, shape, chunks, dtype, seed, backend)}"
    index = tuple(range(len(shape)))
    layer = blockwise(make, name, index, RandomBlocks(chunks), index, numblocks={})
    made = da.Array(layer, name, chunks, dtype=dtype, meta=xp.empty((0,) * len(shape), dtype))
    return mark(made) if isinstance(made, da.Array) else made  # array_plugins may return anything


def _dasks(name, params, size, seed, backend) -> bool:
    """Whether a call goes to Dask's function of ``name``: no ``size`` (a 0-d draw) or
    array parameters, which hpcgpu's kernels do not take."""
    from hpcgpu.array.rng import _scalars

    if size is not None and _scalars(*params):
        return False
    if seed is not None or backend is not None:
        raise ValueError(f"{name}(seed=, backend=) need a size and scalar parameters; "
                         f"without seed= and backend= Dask's {name} draws this")
    return True


def _make_block(backend, seed, method, args, dtype, chunks, block_id=None):
    shape = tuple(c[i] for c, i in zip(chunks, block_id))
    lazy = lazy_random_block(backend, seed, method, args, dtype, shape, block_id)  # inside a fused step
    if lazy is not None:
        return lazy
    return _block(backend, seed, method, args, dtype, shape, block_id)


def normal(loc=0.0, scale=1.0, size=None, chunks="auto", *, dtype="float64", seed=None,
           backend=None) -> da.Array:
    """Normally distributed values.

    Examples
    --------
    >>> x = normal(10, 1, size=(400, 400), chunks=(100, 100), seed=0, backend="cpu")
    >>> round(float(x.mean().compute()), 1)
    10.0
    """
    if _dasks("normal", (loc, scale), size, seed, backend):
        return _dask_random.normal(loc, scale, size, chunks)
    return _make("normal", (float(loc), float(scale)), size, chunks, dtype, seed, backend)


def standard_normal(size=None, chunks="auto", *, dtype="float64", seed=None, backend=None) -> da.Array:
    """``normal(0, 1, size)``."""
    if _dasks("standard_normal", (), size, seed, backend):
        return _dask_random.standard_normal(size, chunks)
    return normal(0.0, 1.0, size, chunks=chunks, dtype=dtype, seed=seed, backend=backend)


def uniform(low=0.0, high=1.0, size=None, chunks="auto", *, dtype="float64", seed=None,
            backend=None) -> da.Array:
    """Values uniform in ``[low, high)``.

    Examples
    --------
    >>> x = uniform(2, 3, size=1000, chunks=100, seed=1, backend="cpu").compute()
    >>> bool((x >= 2).all() and (x < 3).all())
    True
    """
    if _dasks("uniform", (low, high), size, seed, backend):
        return _dask_random.uniform(low, high, size, chunks)
    return _make("uniform", (float(low), float(high)), size, chunks, dtype, seed, backend)


def random(size=None, chunks="auto", *, dtype="float64", seed=None, backend=None) -> da.Array:
    """Values uniform in ``[0, 1)``."""
    if _dasks("random", (), size, seed, backend):
        return _dask_random.random_sample(size, chunks)
    return uniform(0.0, 1.0, size, chunks=chunks, dtype=dtype, seed=seed, backend=backend)


random_sample = random  # Dask's (and NumPy's RandomState's) name for it


def integers(low, high=None, size=None, chunks="auto", *, dtype="int64", seed=None,
             backend=None) -> da.Array:
    """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None).

    Examples
    --------
    >>> sorted(set(integers(3, size=300, chunks=100, seed=2, backend="cpu").compute().tolist()))
    [0, 1, 2]
    """
    if high is None:
        low, high = 0, low
    low, high = int(low), int(high)
    info = np.iinfo(_check_dtype("integers", dtype))
    if not info.min <= low < high <= info.max + 1:
        raise ValueError(f"integers(low={low}, high={high}, dtype={info.dtype.name!r}): need "
                         f"{info.min} <= low < high <= {info.max + 1}")
    return _make("integers", (low, high), size, chunks, dtype, seed, backend)
