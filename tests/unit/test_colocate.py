"""Co-location of the roots whose chunks are combined later (hpcgpu.network.colocate)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from distributed import Client, wait

import hpcgpu.array as ha
from hpcgpu.network.colocate import CoLocateRoots, assign_groups, holder, root_groups, shared_input_groups
from hpcgpu.cluster.local import LocalGPUCluster


class Node:
    """A stand-in for the scheduler's TaskState: dependencies and dependents."""

    def __init__(self, name: str, *deps: "Node"):
        self.name, self.dependencies, self.dependents = name, set(deps), set()
        for d in deps:
            d.dependents.add(self)

    def __repr__(self) -> str:
        return self.name


def names(groups) -> set:
    return {frozenset(n.name for n in g) for g in groups}


def transpose_add(n: int) -> list[Node]:
    """The graph of x + x.T over n x n generated blocks, then one sum."""
    x = {(i, j): Node(f"x{i}{j}") for i in range(n) for j in range(n)}
    adds = [Node(f"a{i}{j}", x[i, j], x[j, i]) for i in range(n) for j in range(n)]
    return [*x.values(), *adds, Node("sum", *adds)]


def test_blocks_combined_with_their_transpose_pair_up():
    groups = root_groups(transpose_add(3), cap=4)
    assert names(groups) == {frozenset({"x01", "x10"}), frozenset({"x02", "x20"}), frozenset({"x12", "x21"})}


def test_chains_of_single_input_tasks_lead_back_to_their_root():
    a, b = Node("a"), Node("b")
    a2, b2 = Node("a2", a), Node("b2", b)
    tasks = [a, b, a2, b2, Node("c1", a2, b2), Node("c2", b2, a2)]
    assert names(root_groups(tasks, cap=2)) == {frozenset({"a", "b"})}


def test_roots_feeding_one_task_each_are_left_to_dask():
    roots = [Node(f"r{i}") for i in range(8)]
    tree = [Node("p0", *roots[:4]), Node("p1", *roots[4:])]
    assert root_groups([*roots, *tree, Node("total", *tree)], cap=4) == []


def test_groups_larger_than_a_workers_share_are_left_to_dask():
    x = [Node(f"x{k}") for k in range(4)]
    y = [Node(f"y{k}") for k in range(4)]
    products = [Node(f"p{i}{j}", x[i], y[j]) for i in range(4) for j in range(4)]  # all meet all
    assert root_groups([*x, *y, *products], cap=4) == []
    assert len(root_groups([*x, *y, *products], cap=8)) == 1


def test_workers_get_contiguous_shares_in_proportion_to_their_threads():
    groups = [[f"{k}a", f"{k}b"] for k in range(6)]
    where = assign_groups(groups, [("w1", 2), ("w2", 1)], priority=str)
    assert [where[f"{k}a"] for k in range(6)] == ["w1"] * 4 + ["w2"] * 2
    assert all(where[f"{k}a"] == where[f"{k}b"] for k in range(6))


class Chunk(Node):
    """A chunk in memory on ``who_has``."""

    def __init__(self, name: str, nbytes: int, *who_has):
        super().__init__(name)
        self.nbytes, self.who_has = nbytes, set(who_has)

    def get_nbytes(self) -> int:
        return self.nbytes


class Worker:
    def __init__(self, address: str):
        self.address = address


def test_tasks_reading_the_same_persisted_chunks_go_where_most_of_their_bytes_are():
    a, b = Worker("a"), Worker("b")
    x01, x10, x00 = Chunk("x01", 10, a), Chunk("x10", 30, b), Chunk("x00", 10, a)
    tasks = [Node("s01", x01, x10), Node("s10", x10, x01), Node("s00", x00, x00)]
    (group,) = shared_input_groups(tasks)
    assert {t.name for t in group} == {"s01", "s10"}
    assert holder(group[0].dependencies, {}) is b
    even = [Chunk("y01", 10, a), Chunk("y10", 10, b)]
    assert holder(even, {a: 1}) is b and holder(even, {b: 1}) is a  # equal bytes: the less loaded


def test_inputs_not_yet_in_memory_are_not_grouped():
    x, y = Chunk("x", 10), Chunk("y", 10, Worker("a"))
    assert shared_input_groups([Node("s", x, y), Node("t", y, x)]) == []


def _moved(dask_worker) -> int:
    return sum(e["total"] for e in dask_worker.transfer_incoming_log)


def _clear(dask_worker) -> None:
    dask_worker.transfer_incoming_log.clear()


def _set(dask_scheduler, active: bool) -> None:
    dask_scheduler.plugins[CoLocateRoots.name].active = active


def _run(client, total, active: bool) -> tuple[float, int]:
    client.run_on_scheduler(_set, active=active)
    client.run(_clear)
    value = client.compute(total).result()
    return value, sum(client.run(_moved).values())


def _cluster() -> LocalGPUCluster:
    """Two CPU workers whose scheduler does not steal: what is tested is where the plugin
    places each task. Dask's work stealing gives a task of a loose restriction to an idle
    worker outside it (distributed.stealing's _get_thief), so under load a co-located
    root may still move, and its block with it (80,080 bytes moved in one CI run)."""
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        return LocalGPUCluster(n_workers=2, gpus=[], dashboard_address=None)


def test_a_local_cluster_moves_no_block_of_a_generated_transpose_sum_and_keeps_its_bits():
    with _cluster() as cluster, Client(cluster) as client:
        assert not client.run_on_scheduler(lambda dask_scheduler: "stealing" in dask_scheduler.extensions)
        for x in (da.random.RandomState(0).random_sample((400, 400), chunks=100),
                  ha.random.uniform(0, 1, size=(400, 400), chunks=100, seed=0, backend="cpu")):
            total = (x + x.T).sum()
            placed, moved = _run(client, total, active=True)
            assert moved < x.nbytes / 100, moved  # only partial sums cross between workers
            default, _ = _run(client, total, active=False)
            assert np.float64(placed).tobytes() == np.float64(default).tobytes()


def test_a_persisted_transpose_sum_moves_one_copy_of_each_split_pair():
    with _cluster() as cluster, Client(cluster) as client:
        x = client.persist(da.random.RandomState(0).random_sample((400, 400), chunks=100))
        wait(x)
        where = {k: set(v) for k, v in client.who_has(x).items()}
        name, block = x.name, 100 * 100 * 8
        split = sum(where[(name, i, j)] != where[(name, j, i)] for i in range(4) for j in range(i + 1, 4))
        total = (x + x.T).sum()
        placed, moved = _run(client, total, active=True)
        assert moved < (split + 0.5) * block, (moved, split)  # one block per split pair, plus partial sums
        default, _ = _run(client, total, active=False)
        assert np.float64(placed).tobytes() == np.float64(default).tobytes()


def test_off_by_default_and_the_dask_config_key_turns_it_on():
    import hpcgpu.system.config  # noqa: F401  (registers hpcgpu.yaml's defaults)

    assert CoLocateRoots().active is False
    with dask.config.set({"hpcgpu.colocate": True}):
        assert CoLocateRoots().active is True


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=4), max_size=20),
       st.integers(2, 6))
def test_groups_are_disjoint_shared_roots_within_the_cap(n_roots, combines, cap):
    roots = [Node(f"r{i}") for i in range(n_roots)]
    tasks = [Node(f"c{k}", *(roots[i % n_roots] for i in deps)) for k, deps in enumerate(combines)]
    groups = root_groups([*tasks, *roots], cap)  # any order
    members = [r for g in groups for r in g]
    assert len(members) == len(set(members))
    assert all(2 <= len(g) <= cap for g in groups)
    assert all(not r.dependencies and len(r.dependents) > 1 for r in members)
    for group in groups:  # each member is combined with another member of its group
        assert all(any(r in t.dependencies and len(t.dependencies & set(group)) > 1 for t in tasks) for r in group)
