"""Doctests' temporary directories (``tempfile.mkdtemp()`` in an example) go under pytest's
own temporary directory for that test, which pytest removes in time, not straight in /tmp."""

import tempfile

import pytest

# imported by fork servers only: importing it freezes the importer's objects (gc.freeze)
collect_ignore = ["hpcgpu/worker/_forkready.py"]


@pytest.fixture(autouse=True)
def _doctest_tempdir(request, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.setattr(tempfile, "tempdir", str(request.getfixturevalue("tmp_path")))
