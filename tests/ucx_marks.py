"""The skip marker of every test that needs UCX (distributed-ucxx and its libucx)."""

from __future__ import annotations

import pytest

from hpcgpu.network import ucx_unavailable_reason

REASON = ucx_unavailable_reason()
needs_ucx = pytest.mark.skipif(
    REASON is not None, reason=f"UCX tests need distributed-ucxx (pip install 'hpcgpu[ucx]'): {REASON}")
