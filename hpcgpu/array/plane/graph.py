"""A collective as a Dask graph: put every input block, one barrier, unpack every output.

``put`` tasks run where Dask has each input block and hand it to the worker's plane (the
block stays where it is; a persisted input's blocks go by one ``put_group`` task per
worker that holds them, :func:`held_groups`); the barrier asks the scheduler to run the
operation on every worker that holds input; ``unpack`` tasks, restricted by the scheduler
to the worker that owns their block, return it as an ordinary key. None of the three is fused with its
neighbours (``block_fusion``): the scheduler must see them by their own keys.

Without a distributed worker (Dask's threaded or synchronous scheduler) the same graph
runs the operation in this process, as a group of one.
"""

from __future__ import annotations

from dask._task_spec import Task, TaskRef
from dask.array.core import Array
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from hpcgpu.array.plane.ops import Context
from hpcgpu.array.plane.plan import block_grid

__all__ = ["collective", "collective_tasks", "deal_to_holders", "held_groups", "put", "put_group", "barrier",
           "unpack"]


class PlaneTask(Task):
    """A task that Dask's linear fusion leaves alone."""

    __slots__ = ()

    @property
    def block_fusion(self) -> bool:
        return True


def _worker():
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def _alone():
    """This process as a plane of one: for graphs run without a distributed cluster."""
    from hpcgpu.array.plane.worker_side import PlaneState

    return PlaneState(None)


_ALONE = _alone()
#: operations whose output blocks the group of one keeps until they are taken
_ALONE_KEPT = 32


class _Nothing:
    name = "none"

    def exchange(self, sends: dict, expect: dict) -> dict:
        return {p: [] for p in expect}


def _state(worker):
    from hpcgpu.array.plane.worker_side import state_of

    return state_of(worker) if worker is not None else _ALONE


def put(token: str, which: int, block: tuple, value) -> list:
    """Hand one input block to this worker's plane; return where it is, and the key of
    the task that put it there (the scheduler recomputes that task if the worker leaves)."""
    from hpcgpu.array.fused.expr import force_all

    # a put inside a fused task may get its block's lazy form (fused kernels trace every
    # step on lazy blocks): the plane keeps the block past the task, so it gets the values
    value, worker = force_all(value), _worker()
    _state(worker).put(token, which, tuple(block), value)
    gpu = type(value).__module__.startswith("cupy")
    if worker is None:
        return [which, list(block), "local", gpu, None]
    return [which, list(block), worker.address, gpu, worker.get_current_task()]


def put_group(token: str, which: int, blocks: list, *values) -> list:
    """Hand several input blocks held by this worker to its plane: one task, not one per
    block (:func:`collective_tasks`' ``groups``); return where each is."""
    return [put(token, which, block, value) for block, value in zip(blocks, values)]


def _markers(done: tuple) -> list:
    """The puts' results, one ``[which, block, address, gpu, put task's key]`` per block."""
    return [m for r in done for m in (r if r and isinstance(r[0], list) else [r])]


def barrier(token: str, spec: dict, unpack_list: list, *markers) -> list:
    """Run the operation on every worker that holds input; return ``[[block, address]]``."""
    worker, markers = _worker(), _markers(markers)
    holders = [m[:3] for m in markers]
    if worker is None:
        return _run_alone(token, spec, holders)
    from distributed.protocol.pickle import dumps
    from distributed.utils import sync

    from hpcgpu.array.plane.scheduler_side import PLUGIN_NAME, MemberLost, PlanePlugin

    state = _state(worker)
    if not getattr(state, "plugin_sent", False):
        sync(worker.loop, worker.scheduler.register_scheduler_plugin,
             plugin=dumps(PlanePlugin()), name=PLUGIN_NAME, idempotent=True)
        state.plugin_sent = True
    try:
        return sync(worker.loop, worker.scheduler.hpcgpu_plane, token=token, spec=spec,
                    holders=holders, unpack=unpack_list, gpu=all(m[3] for m in markers),
                    puts=[m[4] for m in markers])
    except MemberLost:  # the scheduler has removed the worker: run again without it
        from distributed import Reschedule

        raise Reschedule() from None
    except Exception as error:  # the scheduler's message, without distributed's wrapping
        raise RuntimeError(str(error)) from None


def _run_alone(token: str, spec: dict, holders: list) -> list:
    from hpcgpu.array.plane.ops import operation
    from hpcgpu.array.plane.worker_side import _array_module, unpack_keys

    op, state = operation(spec), _ALONE
    ranked = unpack_keys([[w, b, 0] for w, b, _ in holders])
    owners = op.owners(ranked, 1)
    with state._lock:
        inputs = state.inputs.pop(token, {})
    xp = _array_module(next(iter(inputs.values()), None))
    outputs = op.run(Context(0, 1, ranked, owners, inputs, _Nothing(), xp))
    with state._lock:
        state.outputs[token] = outputs
        # blocks of a graph Dask culled are never taken: keep the latest operations only
        for stale in list(state.outputs)[:-_ALONE_KEPT]:
            del state.outputs[stale]
    return [[list(b), "local"] for b in owners]


def unpack(token: str, block: tuple, placed: list):
    """This worker's output block of the operation, as an ordinary key."""
    from hpcgpu.array.plane.worker_side import PlaneState

    return PlaneState.take_output(_state(_worker()), token, tuple(block))


def collective_tasks(op, inputs: list, names: list | None = None,
                     groups: list | None = None) -> tuple[dict, dict]:
    """The tasks of ``op`` on ``inputs`` (``(name, chunks)`` of each input array, numbered
    as the operation numbers them): the puts and the barrier, and per output name its
    unpack tasks. ``names``: the outputs' names (default: made from the operation's token).
    ``groups``: per input, None or lists of its blocks that one worker holds (a persisted
    input): one put task per list, which Dask runs where its blocks are, instead of one
    per block (each task costs the scheduler and the barrier's transfers alike).
    """
    # named outputs are part of the token: two graphs' layers of the same operation on the
    # same input each take their own output blocks
    token = tokenize(op.spec(), *(name for name, _ in inputs), names, groups)
    put_name, bar = f"plane-put-{token}", f"plane-barrier-{op.kind}-{token}"
    outputs = getattr(op, "outputs", None)
    names = names or ([f"{op.kind}-plane-{token}"] if outputs is None else
                      [f"{op.kind}-plane-{token}-{k}" for k in range(len(outputs))])

    def key(block: tuple) -> tuple:  # an output block's key
        return (names[0],) + block if outputs is None else (names[block[0]],) + block[1:]

    dsk, markers = {}, []
    for which, (name, chunks) in enumerate(inputs):
        grouped = (groups or [None] * len(inputs))[which] or []
        for g, blocks in enumerate(grouped):
            k = (f"plane-putgroup-{token}", which, g)
            dsk[k] = PlaneTask(k, put_group, token, which, [list(b) for b in blocks],
                               *(TaskRef((name,) + tuple(b)) for b in blocks))
            markers.append(TaskRef(k))
        taken = {tuple(b) for blocks in grouped for b in blocks}
        for b in block_grid(chunks):
            if b in taken:
                continue
            k = (put_name, which) + b
            dsk[k] = PlaneTask(k, put, token, which, b, TaskRef((name,) + b))
            markers.append(TaskRef(k))
    blocks = op.out_blocks()
    dsk[bar] = PlaneTask(bar, barrier, token, op.spec(), [[list(b), list(key(b))] for b in blocks], *markers)
    unpacks = {name: {} for name in names}
    for b in blocks:
        unpacks[key(b)[0]][key(b)] = PlaneTask(key(b), unpack, token, b, TaskRef(bar))
    return dsk, unpacks


def collective(op, inputs: list, meta):
    """The Dask array that ``op`` (an operation of :mod:`hpcgpu.array.plane.ops`) makes
    of ``inputs`` (Dask arrays, numbered as the operation numbers them); for an operation
    with several ``outputs`` (their chunks; block ids ``(output, *block)``), a tuple of
    arrays, ``meta`` then a list."""
    dsk, unpacks = collective_tasks(op, [(a.name, a.chunks) for a in inputs], groups=held_groups(inputs))
    names, outputs = list(unpacks), getattr(op, "outputs", None)
    if outputs is None:
        graph = HighLevelGraph.from_collections(names[0], {**dsk, **unpacks[names[0]]}, dependencies=inputs)
        return Array(graph, names[0], op.new, meta=meta)
    bar = next(k for k in dsk if isinstance(k, str))
    layers = {bar: MaterializedLayer(dsk), **{n: MaterializedLayer(unpacks[n]) for n in names}}
    deps = {bar: {layer for a in inputs for layer in a.__dask_layers__()}, **{n: {bar} for n in names}}
    for a in inputs:
        layers.update(a.dask.layers)
        deps.update(a.dask.dependencies)
    graph = HighLevelGraph(layers, deps)
    return tuple(Array(graph, n, chunks, meta=m) for n, chunks, m in zip(names, outputs, meta))


def held_groups(inputs: list) -> list | None:
    """Per input array, its blocks grouped by the worker that hands them over (one of their
    holders, :func:`deal_to_holders`), where the array is persisted on this process's
    distributed client and its blocks are in memory (None for an input that is not, and for
    all where no client is current)."""
    try:
        from distributed import Future, default_client

        client = default_client()
    except (ImportError, ValueError):
        return None
    if client.asynchronous:  # its who_has would be a coroutine: the ungrouped graph is as right
        return None
    out = []
    for a in inputs:
        # a persisted array is one layer of futures: read nothing else (a layer of a
        # graph still to run would be materialised just to be looked at)
        layers = a.__dask_graph__().layers
        mapping = getattr(layers.get(a.name), "mapping", None) if len(layers) == 1 else None
        keys = list(mapping or ())
        if not keys or not all(isinstance(mapping[k], Future) for k in keys):
            out.append(None)
            continue
        try:
            held = client.who_has([mapping[k] for k in keys])
        except (OSError, TimeoutError):  # a client that lost its scheduler: ungrouped is as right
            return None
        dealt = deal_to_holders({tuple(key[1:]): where for key, where in held.items()})
        out.append([[list(b) for b in blocks] for _, blocks in sorted(dealt.items())] or None)
    return out if any(out) else None


def deal_to_holders(held: dict) -> dict:
    """``{worker: [block, ...]}``: each block of ``held`` (``{block: the workers that hold
    it}``) given to one of its holders, the one given fewest so far, blocks with fewer
    holders first; ties go to the worker first by address.

    A gather (``x.compute()``) leaves a copy of every block on the worker that joined them:
    the collective's ranks are the workers given blocks, so each block's first holder would
    make it a collective of that one worker.

    Examples
    --------
    >>> deal_to_holders({(0,): {"tcp://a", "tcp://b"}, (1,): {"tcp://a", "tcp://b"}, (2,): {"tcp://a"}})
    {'tcp://a': [(1,), (2,)], 'tcp://b': [(0,)]}
    """
    given: dict = {}
    fewest_holders_first = sorted((len(w), b, sorted(w)) for b, w in held.items() if w)
    for _, block, where in fewest_holders_first:
        worker = min(where, key=lambda w: (len(given.get(w, ())), w))
        given.setdefault(worker, []).append(block)
    return {worker: sorted(blocks) for worker, blocks in sorted(given.items())}
