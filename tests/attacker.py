"""Another user in a thread of this test: ``setfsuid``/``setfsgid`` are per thread on Linux,
so a thread of a root test process acts on files as ``nobody`` (the kernel drops root's
file capabilities with them) while the rest of the process stays root."""

from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["NOBODY", "as_nobody", "can_act_as_nobody"]

NOBODY = 65534
_libc = ctypes.CDLL(None, use_errno=True)


def can_act_as_nobody() -> bool:
    """Root on Linux: a thread can take nobody's filesystem identity."""
    return os.geteuid() == 0 and hasattr(_libc, "setfsuid")


def as_nobody(action, *args):
    """``action(*args)`` in a new thread with nobody's filesystem identity; its result, or
    the exception it raised, re-raised here."""
    box: dict = {}

    def run() -> None:
        _libc.setfsgid(NOBODY)
        _libc.setfsuid(NOBODY)
        try:
            box["result"] = action(*args)
        except BaseException as error:  # handed to the caller
            box["error"] = error

    thread = threading.Thread(target=run, name="nobody")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def become_nobody_in_this_thread() -> None:
    """For a long-lived attacker thread: take nobody's filesystem identity here."""
    _libc.setfsgid(NOBODY)
    _libc.setfsuid(NOBODY)
