"""The plane's plan: pieces tile every output block exactly once, owners are balanced,
row panels are contiguous (property tests over random chunkings)."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings, strategies as st

from hpcgpu.array.plane.plan import assign_owners, block_grid, overlaps, pieces, row_panels


def _chunking(total: int):
    return st.lists(st.integers(1, max(1, total)), min_size=1, max_size=8).map(
        lambda cuts: _split(total, cuts))


def _split(total: int, cuts: list) -> tuple:
    out, left = [], total
    for c in cuts:
        if left <= 0:
            break
        out.append(min(c, left))
        left -= out[-1]
    if left:
        out.append(left)
    return tuple(out)


@st.composite
def two_chunkings(draw):
    shape = draw(st.lists(st.integers(1, 30), min_size=1, max_size=3))
    return tuple(draw(_chunking(n)) for n in shape), tuple(draw(_chunking(n)) for n in shape)


@given(two_chunkings())
@settings(max_examples=60, deadline=None)
def test_pieces_move_every_element_once(chunks):
    old, new = chunks
    shape = tuple(sum(c) for c in old)
    x = np.arange(int(np.prod(shape))).reshape(shape)
    starts = [np.cumsum((0,) + c) for c in old]
    blocks = {b: x[tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, b))] for b in block_grid(old)}
    nstarts = [np.cumsum((0,) + c) for c in new]
    out = {b: np.full(tuple(c[i] for c, i in zip(new, b)), -1) for b in block_grid(new)}
    for p in pieces(old, new):
        assert (out[p.dst_block][p.dst] == -1).all(), "a piece overwrote another"
        out[p.dst_block][p.dst] = blocks[p.src_block][p.src]
    for b, v in out.items():
        assert np.array_equal(v, x[tuple(slice(s[i], s[i + 1]) for s, i in zip(nstarts, b))])


@given(two_chunkings(), st.integers(1, 5), st.randoms())
@settings(max_examples=60, deadline=None)
def test_owners_are_balanced_and_total(chunks, ranks, rnd):
    old, new = chunks
    holders = {b: rnd.randrange(ranks) for b in block_grid(old)}
    out_blocks = block_grid(new)
    owners = assign_owners(pieces(old, new), holders, out_blocks, ranks)
    assert set(owners) == set(out_blocks)
    cap = -(-len(out_blocks) // ranks)
    assert max(list(owners.values()).count(r) for r in range(ranks)) <= cap


def test_an_output_block_goes_to_the_rank_that_holds_it_whole():
    plan = pieces(((2, 2, 2),), ((2, 2, 2),))
    assert assign_owners(plan, {(0,): 2, (1,): 0, (2,): 1}, [(0,), (1,), (2,)], 3) == \
        {(0,): 2, (1,): 0, (2,): 1}


@given(st.lists(st.integers(1, 50), min_size=1, max_size=20), st.integers(1, 8))
def test_row_panels_are_contiguous_and_in_range(rows, ranks):
    panel = row_panels(tuple(rows), ranks)
    assert panel == sorted(panel) and all(0 <= r < ranks for r in panel)


def test_overlaps_refuse_different_lengths():
    import pytest

    with pytest.raises(ValueError, match="different lengths"):
        overlaps((2, 2), (3,))


def test_nccl_sees_loopback_and_no_multicast_from_its_first_call(monkeypatch):
    """The plane's first NCCL call in a worker (rank 0 making the unique id, before any
    communicator) already sees NCCL_SOCKET_IFNAME=lo and NCCL_NVLS_ENABLE=0: NCCL picks its
    network interface once per process (on two H200, an id made without them put every
    later NCCL listener on the host's address). A value the user set stays."""
    import sys
    import types

    from hpcgpu.array.plane.worker_side import PlaneState

    seen = []
    nccl = types.SimpleNamespace(get_unique_id=lambda: seen.append(
        (os.environ.get("NCCL_SOCKET_IFNAME"), os.environ.get("NCCL_NVLS_ENABLE"))) or b"id")
    cuda = types.SimpleNamespace(nccl=nccl)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    for key in ("NCCL_SOCKET_IFNAME", "NCCL_NVLS_ENABLE"):
        monkeypatch.delenv(key, raising=False)
    assert PlaneState(None).nccl_id() == b"id" and seen == [("lo", "0")]
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    PlaneState(None).nccl_id()
    assert seen[-1] == ("ib0", "0")
