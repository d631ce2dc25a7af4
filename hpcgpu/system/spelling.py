"""The known name closest to a misspelt one: the "did you mean" of every refused key."""

from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["closest"]


def closest(name: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` closest to ``name``, or ``None`` where none is close.

    Examples
    --------
    >>> closest("gpus_per_nod", ["nodes", "gpus_per_node"])
    'gpus_per_node'
    >>> closest("colour", ["nodes", "walltime"]) is None
    True
    """
    found = difflib.get_close_matches(name, list(known), n=1)
    return found[0] if found else None
