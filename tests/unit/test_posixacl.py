"""The POSIX ACL reader of the path rule (:mod:`hpcgpu.system.posixacl`): every ACL the
kernel takes parses to the writers a model of its permission check names."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.system.posixacl import ACL_ATTRIBUTE, acl_writers, parse_acl

ANY = 0xFFFFFFFF
_PERM = st.integers(0, 7)
_IDS = st.lists(st.tuples(st.integers(1, 70000), _PERM), max_size=4, unique_by=lambda e: e[0])


def blob(entries) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


@st.composite
def acls(draw):
    """A valid ACL as the kernel orders it: owner, named users, owning group, named groups,
    mask (required with named entries), other."""
    users, groups = draw(_IDS), draw(_IDS)
    mask = draw(_PERM) if users or groups else None
    entries = [(0x01, draw(_PERM), ANY), *[(0x02, p, u) for u, p in users],
               (0x04, draw(_PERM), ANY), *[(0x08, p, g) for g, p in groups],
               *([(0x10, mask, ANY)] if mask is not None else []), (0x20, draw(_PERM), ANY)]
    return entries


def model(entries):
    mask = next((p for t, p, _ in entries if t == 0x10), 7)
    writes = [(t, i) for t, p, i in entries if p & mask & 2]
    return ({i for t, i in writes if t == 0x02}, {i for t, i in writes if t == 0x08},
            any(t == 0x04 for t, _ in writes))


@settings(max_examples=100, deadline=None)
@given(acls())
def test_the_writers_are_those_of_the_kernels_check(entries):
    found = parse_acl(blob(entries))
    assert (set(found.users), set(found.groups), found.owning_group) == model(entries)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_anything_else_is_refused_or_parsed_never_a_crash(data):
    try:
        parse_acl(data)
    except ValueError as error:
        assert "not a POSIX ACL" in str(error)


@settings(max_examples=10, deadline=None)
@given(acls())
def test_what_the_kernel_keeps_reads_back_the_same(entries):
    path = tempfile.mkdtemp(prefix="hpcgpu-acl-")
    try:
        os.setxattr(path, ACL_ATTRIBUTE, blob(entries))
        found = acl_writers(path)
        if len(entries) == 3:  # a minimal ACL is only mode bits: the kernel keeps no xattr
            assert found is None or found.owning_group == model(entries)[2]
        else:
            assert (set(found.users), set(found.groups), found.owning_group) == model(entries)
    finally:
        shutil.rmtree(path, ignore_errors=True)
