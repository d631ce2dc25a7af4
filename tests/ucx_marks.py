"""The skip marker of every test that needs UCX (distributed-ucxx and its libucx), and the
transports those tests give UCX."""

from __future__ import annotations

import os

import pytest

from hpcgpu.network import ucx_unavailable_reason

REASON = ucx_unavailable_reason()
needs_ucx = pytest.mark.skipif(
    REASON is not None, reason=f"UCX tests need distributed-ucxx (pip install 'hpcgpu[ucx]'): {REASON}")


@pytest.fixture(scope="module")
def ucx_over_tcp():
    """UCX over TCP on loopback (no GPU) for a module's processes, unless the run asks for
    every transport of the host (``HPCGPU_UCX_ALL_TRANSPORTS=1``, on a GPU host); set for the
    module, not at import, so that the other tests of the same pytest process (and their
    jobs) do not inherit it."""
    before = os.environ.get("UCX_TLS")
    if not os.environ.get("HPCGPU_UCX_ALL_TRANSPORTS"):
        os.environ.setdefault("UCX_TLS", "tcp")
    yield
    if before is None:
        os.environ.pop("UCX_TLS", None)
