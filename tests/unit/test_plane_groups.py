"""A collective's puts grouped by the worker that holds the blocks (a persisted input): every
input block is handed to the plane exactly once, by one group task or by its own put, and
the barrier reads every put; without a cluster the grouped graph gives the task path's
values (property tests over random chunkings and groupings)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
from dask._task_spec import TaskRef
from hypothesis import given, settings, strategies as st

from hpcgpu.array.plane.graph import _markers, collective_tasks, deal_to_holders
from hpcgpu.array.plane.ops import Matmul, Transpose
from hpcgpu.array.plane.plan import block_grid


@st.composite
def chunks_and_groups(draw):
    chunks = tuple(tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))) for _ in range(2))
    blocks = [list(b) for b in block_grid(chunks)]
    # each block to one of 3 workers, or to none (not in memory yet: a put of its own)
    where = draw(st.lists(st.integers(-1, 2), min_size=len(blocks), max_size=len(blocks)))
    groups = [[b for b, w in zip(blocks, where) if w == k] for k in range(3)]
    return chunks, [g for g in groups if g] or None


def _puts(dsk: dict) -> dict:
    """``{block: number of put tasks that hand it to the plane}``."""
    seen: dict = {}
    for key, task in dsk.items():
        if isinstance(key, str):
            continue
        refs = [a for a in task.args if isinstance(a, TaskRef)]
        for ref in refs:
            block = tuple(ref.key[1:])
            seen[block] = seen.get(block, 0) + 1
    return seen


@given(chunks_and_groups())
@settings(max_examples=80, deadline=None)
def test_every_block_is_put_exactly_once_and_the_barrier_reads_every_put(case):
    chunks, groups = case
    dsk, unpacks = collective_tasks(Transpose(chunks, (1, 0), "f8"), [("x", chunks)], groups=[groups])
    assert _puts(dsk) == {b: 1 for b in block_grid(chunks)}
    (barrier,) = [t for k, t in dsk.items() if isinstance(k, str)]
    puts = {k for k in dsk if not isinstance(k, str)}
    assert set(barrier.dependencies) == puts
    assert len(puts) == len(groups or []) + sum(1 for _ in block_grid(chunks)) - sum(map(len, groups or []))
    assert len(next(iter(unpacks.values()))) == sum(1 for _ in block_grid(chunks[::-1]))


def test_a_grouping_is_part_of_the_token():
    chunks = ((2, 2), (2, 2))
    op = Transpose(chunks, (1, 0), "f8")
    plain, _ = collective_tasks(op, [("x", chunks)])
    grouped, _ = collective_tasks(op, [("x", chunks)], groups=[[[[0, 0], [0, 1]]]])
    assert {k for k in plain if isinstance(k, str)} != {k for k in grouped if isinstance(k, str)}


def test_markers_of_groups_and_single_puts_flatten_alike():
    one = [0, [1, 0], "tcp://a", False]
    group = [[0, [0, 0], "tcp://b", False], [0, [0, 1], "tcp://b", False]]
    assert _markers((one, group)) == [one, *group]


@given(chunks_and_groups())
@settings(max_examples=15, deadline=None)
def test_grouped_graph_gives_the_task_paths_product_without_a_cluster(case):
    chunks, groups = case
    a = np.arange(float(sum(chunks[0]) * sum(chunks[1]))).reshape(sum(chunks[0]), sum(chunks[1]))
    x = da.from_array(a, chunks=chunks)
    op = Matmul(x.chunks, x.T.chunks, x.dtype)
    xt = x.T.rechunk(chunks[::-1])
    groups_t = None if groups is None else [[b[::-1] for b in g] for g in groups]
    dsk, unpacks = collective_tasks(op, [(x.name, x.chunks), (xt.name, xt.chunks)], groups=[groups, groups_t])
    (name,) = unpacks
    graph = {**dict(x.__dask_graph__()), **dict(xt.__dask_graph__()), **dsk, **unpacks[name]}
    out = da.Array(graph, name, op.new, dtype=x.dtype)
    with dask.config.set(scheduler="sync"):
        np.testing.assert_allclose(out.compute(), a @ a.T)


def test_a_client_that_lost_its_scheduler_gives_the_ungrouped_graph(monkeypatch):
    import distributed

    from hpcgpu.array.plane.graph import held_groups

    class Lost:
        asynchronous = False

        def who_has(self, futures):
            raise OSError("Timed out trying to connect to the scheduler")

    class Future:  # a persisted array's layer holds futures only
        pass

    x = da.Array({("x", 0): Future(), ("x", 1): Future()}, "x", ((2, 2),), dtype="f8")
    monkeypatch.setattr(distributed, "Future", Future)
    monkeypatch.setattr(distributed, "default_client", lambda: Lost())
    assert held_groups([x]) is None


@st.composite
def holders_of_blocks(draw):
    """``{block: the workers that hold it}``: 1-D blocks, up to 4 workers, copies anywhere."""
    workers = ["tcp://a", "tcp://b", "tcp://c", "tcp://d"][:draw(st.integers(1, 4))]
    n = draw(st.integers(0, 30))
    return {(i,): draw(st.sets(st.sampled_from(workers), max_size=len(workers))) for i in range(n)}


@given(holders_of_blocks(), st.randoms())
@settings(max_examples=200, deadline=None)
def test_each_block_is_dealt_once_to_one_of_its_holders(held, rng):
    dealt = deal_to_holders(held)
    given_to = {b: w for w, blocks in dealt.items() for b in blocks}
    assert sum(map(len, dealt.values())) == len(given_to)  # no block twice
    assert given_to.keys() == {b for b, where in held.items() if where}
    assert all(w in held[b] for b, w in given_to.items())
    assert all(given_to[b] in where for b, where in held.items() if len(where) == 1)
    shuffled = dict(rng.sample(sorted(held.items()), len(held)))  # who_has order is not an order
    assert deal_to_holders({b: set(rng.sample(sorted(w), len(w))) for b, w in shuffled.items()}) == dealt
    everywhere = {w for where in held.values() for w in where}
    if everywhere and all(where == everywhere for where in held.values()):  # every block on every holder
        loads = [len(dealt.get(w, [])) for w in everywhere]
        assert max(loads) - min(loads) <= 1, dealt


def test_copies_on_one_worker_do_not_take_every_block(monkeypatch):
    """A gather (``x.compute()``) leaves a copy of every block on the worker that joined
    them. Each block went to its first holder by name, so a sort ran as a collective of one
    rank on that worker (seen on 2 x H200); the copies are dealt between the holders."""
    import distributed

    from hpcgpu.array.plane.graph import held_groups

    class Future:  # a persisted array's layer holds futures only
        def __init__(self, key):
            self.key = key

    class Copies:
        asynchronous = False

        def who_has(self, futures):
            return {f.key: ["tcp://a", "tcp://b"] if f.key[1] % 2 else ["tcp://a"] for f in futures}

    x = da.Array({("x", i): Future(("x", i)) for i in range(6)}, "x", ((2,) * 6,), dtype="f8")
    monkeypatch.setattr(distributed, "Future", Future)
    monkeypatch.setattr(distributed, "default_client", lambda: Copies())
    (groups,) = held_groups([x])
    assert sorted(map(len, groups)) == [3, 3] and [[0], [2], [4]] in groups, groups
