"""The keys and values of one random block: counter-based, from the seed and the block index.

The lowest layer of :mod:`hpcgpu.array.random`: the fused evaluators
(:mod:`hpcgpu.array.fused`) draw blocks through these functions and never import the
module that builds random arrays.
"""

from __future__ import annotations

import functools

import numpy as np
from dask.layers import ArrayBlockIdDep

from hpcgpu.array.philox import philox_block

__all__ = ["RandomBlocks", "block_seed", "block_seeds", "draw_block"]


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
    >>> state = np.random.SeedSequence([7, 8], spawn_key=(2, 3)).generate_state(1, np.uint64)
    >>> block_seed([7, 8], (2, 3)) == int(state[0]) and block_seed(np.int64(42), [0, 1]) == block_seed(42, (0, 1))
    True
    """
    block_id = tuple(int(i) for i in block_id)
    if isinstance(seed, (int, np.integer)):
        return _cached_block_seed(int(seed), block_id)
    return _block_seed(seed, block_id)  # a seed given as a sequence of ints


def _block_seed(seed, block_id: tuple[int, ...]) -> int:
    state = np.random.SeedSequence(seed, spawn_key=block_id).generate_state(1, np.uint64)
    return int(state[0])


# NumPy's SeedSequence takes about 25 us a block, as long as drawing a small block: a block
# read twice (x + x.T) or computed again (an iteration) finds its key here
_cached_block_seed = functools.lru_cache(maxsize=1 << 16)(_block_seed)


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


def draw_block(backend, seed, method, args, dtype, shape, block_id=None):
    """One block's values: CuPy's Philox kernel or NumPy's ``Philox``."""
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
