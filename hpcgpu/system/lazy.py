"""Public names imported only when first used: a package's ``__getattr__`` from a table."""

from __future__ import annotations

import importlib
import sys
from typing import Callable

from hpcgpu.system.threadsignals import born_blocked

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first use,
    with the stop signals blocked (:mod:`hpcgpu.system.threadsignals`).

    Examples
    --------
    >>> get = lazy_getattr("pkg", {"dedent": "textwrap"})
    >>> get("dedent").__module__
    'textwrap'
    >>> get("nothing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'pkg' has no attribute 'nothing'
    """
    def __getattr__(name: str):
        if name in exports:
            if exports[name] in sys.modules:
                return getattr(sys.modules[exports[name]], name)
            # Threads that libraries start at import (numpy's OpenBLAS pool) are born
            # blocking the stop signals, which are then left to the main thread.
            with born_blocked():
                return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
