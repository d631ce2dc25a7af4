"""Print a snapshot of process-wide state, import every public module of hpcgpu, print it again.

Run in a fresh interpreter by tests/unit/test_import_state.py. Dask, distributed and their
collections are imported first: the defaults they register are theirs, not hpcgpu's.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import importlib
import json
import logging
import os
import pkgutil
import signal
import socket
import sys
import threading
import warnings

import dask
import dask.array  # noqa: F401
import dask.dataframe  # noqa: F401
import distributed  # noqa: F401


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, name + "."))
        else:
            out[name] = repr(value)
    return out


def _loggers() -> dict:
    named = {"": logging.getLogger()}
    named.update({n: lg for n, lg in logging.Logger.manager.loggerDict.items()
                  if isinstance(lg, logging.Logger)})
    return {name: (lg.level, lg.propagate, lg.disabled, [repr(h) for h in lg.handlers])
            for name, lg in named.items()}


def snapshot() -> dict:
    return {
        "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                    if isinstance(s, signal.Signals) and s not in (signal.SIGKILL, signal.SIGSTOP)},
        "warnings": [repr(f) for f in warnings.filters],
        "dask config": {k: v for k, v in _flat(dask.config.config).items()
                        if not k.startswith(("hpcgpu.", "jobqueue."))},
        "loggers": _loggers(),
        "gc": [gc.isenabled(), gc.get_threshold(), gc.get_freeze_count(), len(gc.callbacks)],
        "hooks": [repr(h) for h in (sys.excepthook, sys.displayhook, sys.unraisablehook,
                                    threading.excepthook, sys.breakpointhook)],
        "sys": [sys.getrecursionlimit(), sys.getswitchinterval(), faulthandler.is_enabled(),
                socket.getdefaulttimeout(), repr(asyncio.get_event_loop_policy())],
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": os.umask(os.umask(0o22)),
    }


def public_modules() -> list[str]:
    import hpcgpu

    names = ["hpcgpu"]
    for info in pkgutil.walk_packages(hpcgpu.__path__, "hpcgpu."):
        parts = info.name.split(".")
        if not any(p.startswith("_") for p in parts):  # no private modules, no __main__
            names.append(info.name)
    return names


if __name__ == "__main__":
    before = snapshot()
    skipped = {}
    for name in public_modules():
        try:
            importlib.import_module(name)
        except ImportError as error:  # an optional dependency (CuPy, cuDF...) not installed
            skipped[name] = str(error)
    import hpcgpu

    for name in hpcgpu.__all__:
        getattr(hpcgpu, name)
    print(json.dumps({"before": before, "after": snapshot(), "skipped": skipped}))
