"""The plane's operations of several rounds on 1 to 5 ranks in threads, over an in-memory
transport: the sample sort (any chunks, holders, ties, NaN and empty ranks give NumPy's
``sort`` and stable ``argsort``) and the tall-and-skinny QR/SVD (NumPy's factors, Dask's
signs); every rank makes the same exchanges."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.array.plane.ops import Context, operation
from hpcgpu.array.plane.sorting import Sort
from hpcgpu.array.plane.tsqr import TallSkinny


class Mailboxes:
    """Rank ``r``'s transport: round ``n``'s arrays from ``src`` to ``dst`` under (n, src, dst)."""

    def __init__(self):
        self.boxes, self.cond, self.calls = {}, threading.Condition(), {}

    def transport(self, rank: int):
        boxes = self

        class Transport:
            rounds = 0

            def exchange(self, sends, expect):
                n, self.rounds = self.rounds, self.rounds + 1
                with boxes.cond:
                    boxes.calls.setdefault(rank, []).append(n)
                    for dst, arrays in sends.items():
                        if arrays:
                            boxes.boxes[(n, rank, dst)] = [np.array(a, copy=True) for a in arrays]
                    boxes.cond.notify_all()
                    want = {p for p, shapes in expect.items() if shapes}
                    assert boxes.cond.wait_for(lambda: all((n, p, rank) in boxes.boxes for p in want), 10)
                    got = {p: boxes.boxes.pop((n, p, rank)) if p in want else [] for p in expect}
                for p, arrays in got.items():  # what arrived is what was announced
                    assert [(a.shape, a.dtype.str) for a in arrays] == \
                        [(tuple(s), np.dtype(d).str) for s, d in expect[p]]
                return got

        return Transport()


def run_ranks(op, values: np.ndarray, chunks: tuple, holder_of: list, ranks: int) -> tuple:
    """Every rank's outputs of ``op`` (through its spec, as workers get it) and the owners,
    the rows of ``values`` in blocks ``chunks`` held by ``holder_of``."""
    op = operation(op.spec())
    starts = np.concatenate([[0], np.cumsum(chunks)])
    tail = (0,) * (values.ndim - 1)
    holders = {(0, (i,) + tail): holder_of[i] for i in range(len(chunks))}
    owners = op.owners(holders, ranks)
    mail = Mailboxes()

    def rank_run(rank):
        inputs = {(0, (i,) + tail): values[starts[i]:starts[i + 1]]
                  for i in range(len(chunks)) if holder_of[i] == rank}
        return op.run(Context(rank, ranks, holders, owners, inputs, mail.transport(rank), np))

    with ThreadPoolExecutor(ranks) as pool:
        outputs = list(pool.map(rank_run, range(ranks)))
    assert len({tuple(c) for c in mail.calls.values()}) == 1  # the same rounds on every rank
    return outputs, owners


def run_sort(values: np.ndarray, chunks: tuple, holder_of: list, ranks: int, arg: bool):
    outputs, owners = run_ranks(Sort((chunks,), values.dtype, arg), values, chunks, holder_of, ranks)
    blocks = {}
    for rank, out in enumerate(outputs):
        assert set(out) == {b for b, r in owners.items() if r == rank}
        blocks.update(out)
    return np.concatenate([blocks[(i,)] for i in range(len(chunks))])


@st.composite
def cases(draw):
    ranks = draw(st.integers(1, 5))
    chunks = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=9)))
    holder_of = draw(st.lists(st.integers(0, ranks - 1), min_size=len(chunks), max_size=len(chunks)))
    n = sum(chunks)
    kind = draw(st.sampled_from(["ties", "float", "nan", "same"]))
    values = draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))
    values = np.array(values, dtype=np.int64 if kind == "ties" else np.float64)
    if kind == "float":
        values = values * 0.25 + np.arange(n) * 1e-3
    elif kind == "nan":
        values[::3] = np.nan
    elif kind == "same":
        values[:] = 7
    return values, chunks, holder_of, ranks


@settings(max_examples=60, deadline=None)
@given(cases())
def test_sample_sort_equals_numpy_on_any_ranks_chunks_and_holders(case):
    values, chunks, holder_of, ranks = case
    got = run_sort(values, chunks, holder_of, ranks, arg=False)
    assert np.array_equal(got, np.sort(values), equal_nan=True)
    assert got.dtype == values.dtype
    order = run_sort(values, chunks, holder_of, ranks, arg=True)
    assert np.array_equal(order, np.argsort(values, kind="stable"))


def test_a_rank_that_holds_nothing_still_takes_a_bucket():
    values = np.arange(40.0)[::-1].copy()
    assert np.array_equal(run_sort(values, (10, 10, 10, 10), [0, 0, 2, 2], 4, arg=False), np.arange(40.0))


@st.composite
def tall(draw):
    ranks, cols = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    chunks = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=7)))
    if sum(chunks) < cols:
        chunks += (cols,)
    holder_of = draw(st.lists(st.integers(0, ranks - 1), min_size=len(chunks), max_size=len(chunks)))
    used = sorted(set(holder_of))  # ranks are the holders (the plane's group), numbered densely
    holder_of = [used.index(h) for h in holder_of]
    seed = draw(st.integers(0, 2**16))
    values = np.random.default_rng(seed).standard_normal((sum(chunks), cols))
    return values, chunks, holder_of, len(used)


@settings(max_examples=60, deadline=None)
@given(tall())
def test_tall_skinny_qr_and_svd_equal_numpy_with_dasks_signs(case):
    from dask.array.utils import svd_flip

    values, chunks, holder_of, ranks = case
    cols = values.shape[1]
    op = TallSkinny((chunks, (cols,)), values.dtype)
    outputs, owners = run_ranks(op, values, chunks, holder_of, ranks)
    blocks = {b: v for out in outputs for b, v in out.items()}
    assert set(blocks) == set(op.out_blocks()) and all(owners[b] == 0 for b in op.out_blocks()[len(chunks):])
    q = np.concatenate([blocks[(0, i, 0)] for i in range(len(chunks))])
    r = blocks[(1, 0, 0)]
    assert np.allclose(q @ r, values) and np.allclose(q.T @ q, np.eye(cols)) and np.allclose(np.tril(r, -1), 0)
    outputs, _ = run_ranks(TallSkinny((chunks, (cols,)), values.dtype, svd=True), values, chunks, holder_of, ranks)
    blocks = {b: v for out in outputs for b, v in out.items()}
    u = np.concatenate([blocks[(0, i, 0)] for i in range(len(chunks))])
    s, vt = blocks[(1, 0)], blocks[(2, 0, 0)]
    want_u, want_s, want_vt = np.linalg.svd(values, full_matrices=False)
    assert np.allclose(s, want_s)
    # singular vectors unique up to sign, and a sign that rounding cannot tip
    if len(set(np.round(want_s, 6))) == cols and want_s.min() > 1e-6 and np.abs(want_vt.sum(axis=1)).min() > 1e-6:
        want_u, want_vt = svd_flip(want_u, want_vt)
        assert np.allclose(u, want_u, atol=1e-6) and np.allclose(vt, want_vt, atol=1e-6)
    assert np.allclose((u * s) @ vt, values)
