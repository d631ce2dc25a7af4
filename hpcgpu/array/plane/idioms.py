"""Dask's own ``a @ b``, ``a.dot(b)``, ``x.rechunk(...)`` and tall-and-skinny
``da.linalg.qr``/``svd`` on the plane: a pass over the graph.

Users write Dask: ``a @ b`` (or ``a.dot(b)``) and ``x.rechunk(...)`` build Dask's layers
(a block product per block triple and a tree of sums; split and merge stages), and
``da.linalg.qr(x)`` or ``svd(x)`` of a tall-and-skinny ``x`` Dask's TSQR (a QR per block,
a QR of the stacked R factors, the second Q multiplied back), not the plane's. This pass,
run by hpcgpu's optimiser on graphs that hold hpcgpu arrays, finds those layers and puts
the plane's operation in their place under the names of the results (the last layer; the
TSQR's two or three): the keys, chunks and dtype the rest of the graph reads stay as they
were, and only the layers between the inputs and the results go. Where
``hpcgpu.array.collective`` (carried with the graph in
:class:`~hpcgpu.array.scope.Settings`) does not choose the plane, or a shape is not one
the plane takes (a layer read by something else, chunk types other than NumPy's and
CuPy's, inputs of another dtype than the result), the graph is left as it is.

Examples
--------
>>> import dask.array as da, numpy as np
>>> x = da.from_array(np.arange(16.0).reshape(4, 4), chunks=2)
>>> y = x @ x
>>> routed = route(y.__dask_graph__(), lambda kind: True, y.__dask_keys__())
>>> sorted(n.split("-")[0] for n in routed.layers)
['_chunk_sum', 'array']
>>> from dask.array.core import Array
>>> bool((Array(routed, y.name, y.chunks, meta=y._meta).compute() == x.compute() @ x.compute()).all())
True
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator

import numpy as np
from dask.blockwise import Blockwise
from dask.core import flatten
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from hpcgpu.array.plane.graph import collective_tasks
from hpcgpu.array.plane.ops import Matmul, Rechunk
from hpcgpu.array.plane.tsqr import TallSkinny

__all__ = ["route"]

logger = logging.getLogger("distributed.hpcgpu.plane")

#: the layers of Dask's ``_sum_wo_cat`` after a matmul's block products, in order
_SUM_STAGES = ("chunk_sum-", "_chunk_sum-partial-", "_chunk_sum-aggregate-")
#: the layers of the ``sum`` after ``tensordot``'s block products (``a.dot(b)``)
_DOT_SUM_STAGES = ("sum-", "sum-partial-", "sum-aggregate-")
#: the layers of Dask's task rechunk (one or several stages)
_RECHUNK_STAGES = ("rechunk-split-", "rechunk-merge-")
#: chunk types the plane's operations take
_CHUNK_TYPES = ("numpy.ndarray", "cupy.ndarray", "cupy._core.core.ndarray")


def route(dsk: HighLevelGraph, choose: Callable[[str], bool], keys=()) -> HighLevelGraph:
    """``dsk`` with each matmul, rechunk and TSQR that ``choose(kind)`` wants on the plane
    replaced by the plane's layers (see the module's docstring). A layer that ``keys``
    (the keys asked for) name stays, unless it is one of the results."""
    finders = [find for kind, find in (("matmul", _matmuls), ("rechunk", _rechunks), ("tsqr", _tall_skinnies))
               if choose(kind)]
    if not finders:  # auto without a distributed client, or never: no walk over the layers
        return dsk
    dependents = _dependents(dsk)
    asked = {k[0] if isinstance(k, tuple) else k for k in flatten(keys)}
    found, taken = [], set()
    # largest first: a TSQR's stacked R factors may be a TSQR of their own, the outer one
    # replaces both
    for f in sorted((f for find in finders for f in find(dsk, dependents)), key=lambda f: -len(f[2])):
        if asked.isdisjoint(set(f[2]) - set(f[3])) and taken.isdisjoint(f[2]):
            found.append(f)
            taken.update(f[2])
    if not found:
        return dsk
    layers, deps = dict(dsk.layers), dict(dsk.dependencies)
    for op, inputs, replaced, outputs in found:
        tasks, unpacks = collective_tasks(op, inputs, names=outputs)
        for name in replaced:
            del layers[name], deps[name]
        if len(outputs) == 1:  # the barrier in the result's layer
            unpacks[outputs[0]].update(tasks)
            deps[outputs[0]] = {name for name, _ in inputs}
        else:
            bar = next(k for k in tasks if isinstance(k, str))
            layers[bar], deps[bar] = MaterializedLayer(tasks), {name for name, _ in inputs}
            deps.update((name, {bar}) for name in outputs)
        for name in outputs:
            layers[name] = MaterializedLayer(unpacks[name], collection_annotations=dsk.layers[name].collection_annotations)
        logger.info("%s: collective path (Dask's layers up to %s)", op.kind, ", ".join(outputs))
    return HighLevelGraph(layers, deps)


def _dependents(dsk: HighLevelGraph) -> dict:
    out: dict = {name: set() for name in dsk.layers}
    for name, deps in dsk.dependencies.items():
        for d in deps:
            out.setdefault(d, set()).add(name)
    return out


def _array(dsk: HighLevelGraph, name: str):
    """(chunks, dtype) of the array a layer makes, or None if the layer does not say, or
    its blocks are of a type the plane does not take."""
    info = (dsk.layers[name].collection_annotations or {}) if name in dsk.layers else {}
    if "chunks" not in info or "dtype" not in info or info.get("chunk_type") not in _CHUNK_TYPES:
        return None
    return tuple(tuple(int(c) for c in axis) for axis in info["chunks"]), np.dtype(info["dtype"])


def _chain(start: str, stages: tuple, dependents: dict, end: str | None = None) -> list:
    """``start`` and the layers after it while each is the only reader of the one before
    and is named as one of ``stages`` (up to one named ``end``, if given)."""
    chain = [start]
    while not (end and chain[-1].startswith(end)):
        nxt = dependents.get(chain[-1], set())
        if len(nxt) != 1 or not next(iter(nxt)).startswith(stages):
            break
        chain.append(next(iter(nxt)))
    return chain


def _products(layer) -> tuple | None:
    """The sum stages after ``layer`` if it is the block products of a 2-D ``a @ b``
    (Dask's ``matmul``) or ``a.dot(b)`` (``tensordot`` over a's columns and b's rows)."""
    from dask.array.routines import _matmul, _tensordot

    if not isinstance(layer, Blockwise) or layer.new_axes or layer.concatenate or len(layer.indices) != 2:
        return None
    func, kwargs = getattr(layer.task, "func", None), getattr(layer.task, "kwargs", None) or {}
    (_, ia), (_, ib) = layer.indices
    if ia is None or ib is None or len(ia) != 2 or len(ib) != 2 or ia[1] != ib[0] \
            or tuple(layer.output_indices) != (ia[0], ia[1], ib[1]):
        return None
    if func is _matmul:
        return _SUM_STAGES
    axes = kwargs.get("axes")
    if func is _tensordot and not kwargs.get("is_sparse") and axes is not None \
            and tuple(map(tuple, axes)) == ((1,), (0,)):
        return _DOT_SUM_STAGES
    return None


def _matmuls(dsk: HighLevelGraph, dependents: dict) -> Iterator[tuple]:
    for name, layer in dsk.layers.items():
        stages = _products(layer)
        if stages is None:
            continue
        (a, _), (b, _) = layer.indices
        chain = _chain(name, stages, dependents, end=stages[-1])
        got = [_array(dsk, n) for n in (a, b, chain[-1])]
        if not chain[-1].startswith(stages[-1]) or None in got:
            continue
        (ac, adt), (bc, bdt), (oc, odt) = got
        if ac[1] == bc[0] and oc == (ac[0], bc[1]) and adt == bdt == odt:
            yield Matmul(ac, bc, odt), [(a, ac), (b, bc)], chain, chain[-1:]


def _rechunks(dsk: HighLevelGraph, dependents: dict) -> Iterator[tuple]:
    for name in dsk.layers:
        deps = dsk.dependencies.get(name, set())
        if not name.startswith(_RECHUNK_STAGES) or len(deps) != 1:
            continue
        (source,) = deps
        if source.startswith(_RECHUNK_STAGES) and len(dependents.get(source, ())) == 1:
            continue  # not the first stage (a stage that others read too ends a chain)
        chain = _chain(name, _RECHUNK_STAGES, dependents)
        got = [_array(dsk, n) for n in (source, chain[-1])]
        if None in got or any(len(dsk.dependencies.get(n, ())) != 1 for n in chain):
            continue
        (xc, xdt), (yc, ydt) = got
        if xdt == ydt and xc != yc and np.prod([len(c) for c in xc]) > 1:
            yield Rechunk(xc, yc, xdt), [(source, xc)], chain, chain[-1:]


def _tall_skinnies(dsk: HighLevelGraph, dependents: dict) -> Iterator[tuple]:
    """Dask's TSQR (``da.linalg.qr``, ``svd`` of a tall-and-skinny array): a QR per block,
    the stacked R factors factored (by a TSQR of their own when there are many), the second
    Q multiplied back. Its layers are those between its input and its results (``q, r`` or
    ``u, s, v`` before ``svd``'s sign flip); only the results may be read from outside."""
    for name, layer in dsk.layers.items():
        token = name[len("qr-"):]
        if not (name.startswith("qr-") and isinstance(layer, Blockwise) and f"stack-{token}-r1" in dsk.layers
                and len(dsk.dependencies.get(name, ())) == 1):
            continue
        svd = f"svd-{token}-2" in dsk.layers
        outputs = ([f"getitem-{token}-u4", f"getitem-{token}-s2", f"getitem-{token}-v2"] if svd
                   else [f"dot-{token}-q3", next((r for r in (f"getitem-{token}-r2", f"r-inner-{token}")
                                                  if r in dsk.layers), "")])
        (source,) = dsk.dependencies[name]
        members = _between(dsk, dependents, source, outputs) if all(o in dsk.layers for o in outputs) else None
        if not members or any(dependents.get(n, set()) - members for n in members - set(outputs)):
            continue
        got = [_array(dsk, n) for n in (source, *outputs)]
        if None in got or got[0][1].kind != "f" or len(got[0][0]) != 2 or len(got[0][0][1]) != 1 \
                or sum(got[0][0][0]) < got[0][0][1][0]:
            continue
        op = TallSkinny(got[0][0], got[0][1], svd)
        if [c for c, _ in got[1:]] == [tuple(o) for o in op.outputs] and all(dt == got[0][1] for _, dt in got[1:]):
            yield op, [(source, got[0][0])], sorted(members), outputs


def _between(dsk: HighLevelGraph, dependents: dict, source: str, outputs: list) -> set | None:
    """The layers on the way from ``source`` to ``outputs`` (those included, ``source``
    not); None if the way passes a layer that does not come from ``source`` and reads
    something (another input)."""
    seen, todo = set(), list(outputs)
    while todo:
        name = todo.pop()
        if name == source or name in seen:
            continue
        seen.add(name)
        todo.extend(dsk.dependencies.get(name, ()))
    after, todo = set(), [source]
    while todo:
        for d in dependents.get(todo.pop(), set()) & seen - after:
            after.add(d)
            todo.append(d)
    return None if any(dsk.dependencies.get(n) for n in seen - after) else seen
