"""hpcgpu as a source tree on ``PYTHONPATH`` runs it (the lent GPU machines): no package
metadata, so no entry point names hpcgpu's comm backends. ``hide_entry_points`` writes a
``sitecustomize`` that hides them in every Python process that gets the returned
``PYTHONPATH`` (spawned and batch-job processes included)."""

from __future__ import annotations

import os
from pathlib import Path

HIDE_ENTRY_POINTS = """
import importlib.metadata as metadata
_all = metadata.entry_points
metadata.entry_points = lambda **select: metadata.EntryPoints(
    e for e in _all(**select) if not e.value.startswith("hpcgpu."))
"""


def hide_entry_points(directory: Path) -> str:
    """A ``PYTHONPATH`` value: ``directory`` (holding the ``sitecustomize``) before this one."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(HIDE_ENTRY_POINTS)
    return os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
