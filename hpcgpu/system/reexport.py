"""Dask's names under hpcgpu's modules: a module ``__getattr__``/``__dir__`` that fall
back to the matching ``dask.array`` (or ``dask.dataframe``) module; used by
:mod:`hpcgpu.array`, :mod:`hpcgpu.dataframe` and their submodules.

hpcgpu's own definitions stay first (a module ``__getattr__`` runs only for names the
module lacks), so ``import hpcgpu.array as da`` finds hpcgpu's fast paths where it has
them and Dask's own objects, not copies, everywhere else. Dask is not modified.

Examples
--------
>>> import hpcgpu.array as ha, dask.array as da
>>> ha.Array is da.Array, ha.fft.fft is da.fft.fft, "einsum" in dir(ha)
(True, True, True)
"""

from __future__ import annotations

import importlib

__all__ = ["fallback", "public_names"]


def public_names(target: str) -> list[str]:
    """The public names of module ``target``: its ``__all__``, else its names without ``_``.

    Examples
    --------
    >>> "fft" in public_names("dask.array.fft")
    True
    """
    module = importlib.import_module(target)
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [n for n in vars(module) if not n.startswith("_") and n != "annotations"]  # __future__


def fallback(name: str, own: dict, target: str):
    """``(__getattr__, __dir__, __all__)`` for module ``name`` (whose globals are ``own``)
    falling back to module ``target``.

    ``__all__`` is ``own``'s ``__all__`` (if any) followed by ``target``'s public names, so
    ``from hpcgpu.array import *`` gives what ``from dask.array import *`` does and more.
    """

    def __getattr__(attr: str):
        if attr.startswith("__") and attr.endswith("__"):  # __path__, __file__, ...: not Dask's
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        try:
            return getattr(importlib.import_module(target), attr)
        except AttributeError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r} "
                                 f"(nor has {target!r}, which it extends)") from None

    def __dir__() -> list[str]:
        return sorted(set(own) | set(dir(importlib.import_module(target))))

    mine = list(own.get("__all__", []))
    return __getattr__, __dir__, mine + [n for n in public_names(target) if n not in mine]
