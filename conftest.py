"""Doctests' temporary directories (``tempfile.mkdtemp()`` in an example) go under pytest's
own temporary directory for that test, which pytest removes in time, not straight in /tmp."""

import tempfile

import pytest

# _forkready: imported by fork servers only (importing it freezes the importer's objects);
# array/stats: no examples, and its import (scipy.stats, 1 CPU-s) would be paid by every
# pytest process for its doctests; tests/unit/test_no_scipy.py imports it once
collect_ignore = ["hpcgpu/worker/_forkready.py", "hpcgpu/array/stats.py"]


@pytest.fixture(autouse=True)
def _doctest_tempdir(request, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.setattr(tempfile, "tempdir", str(request.getfixturevalue("tmp_path")))
