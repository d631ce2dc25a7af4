"""The plane's sample sort (hpcgpu.array.plane.sorting) on 1 to 5 ranks in threads, over
an in-memory transport: any chunks, holders, ties, NaN and empty ranks give NumPy's
``sort`` and stable ``argsort``; every rank makes the same exchanges."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.array.plane.ops import Context, operation
from hpcgpu.array.plane.sorting import Sort


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


def run_sort(values: np.ndarray, chunks: tuple, holder_of: list, ranks: int, arg: bool):
    op = operation(Sort((chunks,), values.dtype, arg).spec())
    starts = np.concatenate([[0], np.cumsum(chunks)])
    holders = {(0, (i,)): holder_of[i] for i in range(len(chunks))}
    owners = op.owners(holders, ranks)
    mail = Mailboxes()

    def rank_run(rank):
        inputs = {(0, (i,)): values[starts[i]:starts[i + 1]]
                  for i in range(len(chunks)) if holder_of[i] == rank}
        return op.run(Context(rank, ranks, holders, owners, inputs, mail.transport(rank), np))

    with ThreadPoolExecutor(ranks) as pool:
        outputs = list(pool.map(rank_run, range(ranks)))
    assert len({tuple(c) for c in mail.calls.values()}) == 1  # the same rounds on every rank
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
