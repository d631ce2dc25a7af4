"""A NumPy transcription of hpcgpu.array.philox's kernels, to check them against.

Written from the algorithm's definition (Salmon et al., SC'11, Random123), not from the
CUDA source: a GPU test compares the kernels' blocks with these, a CPU test checks the
generator against Random123's published known answers.
"""

from __future__ import annotations

import numpy as np

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32_10(counters: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of each row of ``counters`` (n x 4, uint32) under ``key``."""
    c = [counters[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(W0)) & np.uint64(MASK), (k1 + np.uint64(W1)) & np.uint64(MASK)
        p0, p1 = np.uint64(M0) * c[0], np.uint64(M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & np.uint64(MASK), (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & np.uint64(MASK)]
    return np.stack(c, axis=1).astype(np.uint32)


def words(key: int, n: int, per_counter: int) -> np.ndarray:
    """The four words of each counter a block of ``n`` values uses."""
    t = np.arange(-(-n // per_counter), dtype=np.uint64)
    counters = np.zeros((len(t), 4), dtype=np.uint32)
    counters[:, 0], counters[:, 1] = t & np.uint64(MASK), t >> np.uint64(32)
    return philox4x32_10(counters, (key & MASK, key >> 32))


def _unit53(hi, lo):
    return ((hi.astype(np.uint64) << np.uint64(32) | lo) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _unit24(w):
    return (w >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


def block(key: int, method: str, args: tuple, dtype, shape: tuple) -> np.ndarray:
    """What ``philox_block(key, method, args, dtype, shape)`` gives, computed with NumPy."""
    dtype, n = np.dtype(dtype), int(np.prod(shape))
    if method == "integers":
        w = words(key, n, 2)
        low, high = args
        draws = np.stack([w[:, 0].astype(np.uint64) << np.uint64(32) | w[:, 1],
                          w[:, 2].astype(np.uint64) << np.uint64(32) | w[:, 3]], axis=1).ravel()[:n]
        offsets = [(int(d) * (high - low)) >> 64 for d in draws]  # exact 128-bit product
        return np.array([low + o for o in offsets]).astype(dtype).reshape(shape)
    if dtype == np.float64:
        w = words(key, n, 2)
        a, b = _unit53(w[:, 0], w[:, 1]), _unit53(w[:, 2], w[:, 3])
        if method == "uniform":
            low, high = args
            values = np.stack([a, b], axis=1) * (high - low) + low
        else:
            loc, scale = args
            r = np.sqrt(-2.0 * np.log(1.0 - a))
            values = loc + scale * np.stack([r * np.cos(2 * np.pi * b), r * np.sin(2 * np.pi * b)], axis=1)
        return values.ravel()[:n].reshape(shape)
    w = words(key, n, 4)
    u = _unit24(w).astype(np.float64)
    if method == "uniform":
        low, high = args
        return (u * (high - low) + low).astype(np.float32).ravel()[:n].reshape(shape)
    loc, scale = args
    r = np.sqrt(-2.0 * np.log(1.0 - u[:, 0::2]))
    pairs = np.stack([r * np.cos(2 * np.pi * u[:, 1::2]), r * np.sin(2 * np.pi * u[:, 1::2])], axis=2)
    return (loc + scale * pairs).astype(np.float32).ravel()[:n].reshape(shape)
