"""The socket filter that keeps a wildcard listener to its asked address (ucx+auth's, whose
ucxx API binds every address): a connection to another address of this host is never set
up, one to the asked address is. 127.0.0.2 stands for "another address of this host" (every
127/8 address reaches a 0.0.0.0 listener). The real UCX listeners:
tests/integration/test_listeners.py."""

from __future__ import annotations

import logging
import os
import socket

import pytest

from hpcgpu.network.bindfilter import admit_only
from hpcgpu.network.ucxauth import keep_to_asked_address
from listeners import connects


@pytest.fixture
def wildcard():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _connects(address: str, port: int) -> bool:
    return connects(address, port, timeout=0.5)


def test_a_filtered_listener_takes_connections_at_the_asked_address_only(wildcard):
    assert _connects("127.0.0.2", wildcard)  # without the filter: every address
    assert admit_only(wildcard, "127.0.0.2")
    assert [_connects(a, wildcard) for a in ("127.0.0.1", "127.0.0.2")] == [False, True]


def test_a_host_name_is_its_address_and_every_address_needs_no_filter(wildcard):
    assert keep_to_asked_address("0.0.0.0", wildcard, "ucx+auth://0.0.0.0:1")
    assert _connects("127.0.0.2", wildcard)
    assert keep_to_asked_address("localhost", wildcard, "ucx+auth://localhost:1")
    assert [_connects(a, wildcard) for a in ("127.0.0.1", "127.0.0.2")] == [True, False]


def test_a_listener_it_cannot_find_is_said(caplog):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))  # not a wildcard listener
        other.listen()
        port = other.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="hpcgpu.network"):
            assert not keep_to_asked_address("127.0.0.1", port, "ucx+auth://127.0.0.1:1")
    assert "listens on every address of this host, not only 127.0.0.1" in caplog.text


def test_looking_for_the_listener_leaves_no_descriptor_open(wildcard):
    """hpcgpu run learns the scheduler's address from a pipe that it reads until it closes:
    a copy of its end left open by the search would make it wait forever."""
    read, write = os.pipe()
    os.set_blocking(read, False)  # a copy of the write end left open: BlockingIOError, no hang
    assert admit_only(wildcard, "127.0.0.1")
    os.close(write)
    assert os.read(read, 1) == b""  # end of file: no copy of the write end is left
    os.close(read)
