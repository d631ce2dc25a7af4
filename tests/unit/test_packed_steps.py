"""A fused task's steps are dropped by the process that sent them: the scheduler's record of
recent messages (distributed keeps the last 1,000 batches per worker) holds bytes, not the
hundreds of objects per task that every full garbage collection would walk again."""

from __future__ import annotations

import gc
import pickle
import types

import dask
import numpy as np
from distributed import Client, LocalCluster
from hypothesis import given
from hypothesis import strategies as st

import hpcgpu.array as ha
from hpcgpu.array.lazy_blocks import BlockStep
from hpcgpu.array.optimization import _run_fused
from hpcgpu.array.packed import PackedSteps

values = st.recursive(st.none() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner), max_leaves=12)


def _array_sum(n=200, chunk=4):
    x = ha.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=3, backend="cpu")
    return (x + 1)[::2, ::2].sum()  # 2,500 blocks: fused into trees


def _tracked_below(obj) -> int:
    """How many objects the garbage collector tracks that ``obj`` reaches, leaving out
    functions, classes and modules (reached through them is the whole program)."""
    seen, todo = set(), [obj]
    while todo:
        o = todo.pop()
        if id(o) not in seen and gc.is_tracked(o) and not isinstance(o, (type, types.FunctionType, types.ModuleType)):
            seen.add(id(o))
            todo.extend(gc.get_referents(o))
    return len(seen)


@given(st.tuples(values, values))
def test_steps_survive_pickling_and_the_sender_keeps_only_bytes(steps):
    packed = PackedSteps(steps)
    token = dask.base.tokenize(PackedSteps(steps))
    sent = pickle.loads(pickle.dumps(packed))
    assert sent.steps() == steps and packed.steps() == steps
    assert _tracked_below(packed) == 1  # itself: the bytes are not tracked
    assert dask.base.tokenize(packed) == dask.base.tokenize(sent) == token


def test_a_fused_task_pickled_holds_a_few_objects_and_computes_the_same():
    total = _array_sum()
    want = total.compute(scheduler="sync")
    (opt,) = dask.optimize(total)
    graph = dict(opt.__dask_graph__())
    fused = [t for t in graph.values() if getattr(t, "func", None) is _run_fused]
    assert fused
    before = min(_tracked_below(t.args[0].value) for t in fused)
    sent = {k: pickle.loads(pickle.dumps(v)) for k, v in graph.items()}
    assert max(_tracked_below(t.args[0].value) for t in fused) == 1 < 50 < before
    got = dask.get(sent, opt.__dask_keys__())
    assert np.allclose(np.asarray(got).sum(), want)


def _block_steps() -> int:
    gc.collect()
    return sum(isinstance(o, BlockStep) for o in gc.get_objects())


def test_the_scheduler_process_keeps_no_block_steps_after_computes():
    # counted before and after: other tests of this process may hold graphs of their own
    # (an in-process cluster never pickles its tasks)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        want = _array_sum().compute(scheduler="sync")
        before = _block_steps()
        for _ in range(3):
            assert np.isclose(client.compute(_array_sum()).result(), want)
        assert _block_steps() <= before
