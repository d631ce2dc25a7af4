"""How the batch scheduler tells ``hpcgpu run`` its address: over a pipe, not a file.

``hpcgpu run`` used to poll a scheduler file in the job directory and take the first one it
could read; another user who could swap the directory got the run connected to their own
scheduler (#38). Now the scheduler gets the write end of a pipe (its number in
``HPCGPU_ADDRESS_FD``) and this preload (``--preload hpcgpu.runner.address_pipe``), once
the scheduler listens, writes ``{"address": ..., "services": {...}}`` there and closes it.
Only the scheduler ``hpcgpu run`` started holds that pipe.
"""

from __future__ import annotations

import json
import os

__all__ = ["ENV", "dask_setup", "identity_text"]

#: The variable naming the pipe's write end in the scheduler's environment.
ENV = "HPCGPU_ADDRESS_FD"


def identity_text(address: str, services: dict) -> bytes:
    """What goes through the pipe.

    >>> identity_text("tls://10.0.0.1:8786", {"dashboard": 8787})
    b'{"address": "tls://10.0.0.1:8786", "services": {"dashboard": 8787}}'
    """
    return json.dumps({"address": address, "services": services}).encode()


def dask_setup(scheduler) -> None:
    """Preload hook, run once the scheduler listens: write its identity, close the pipe."""
    fd = os.environ.pop(ENV, None)  # not for what the scheduler might start
    if fd is None:
        return
    data = identity_text(scheduler.address, scheduler.identity().get("services", {}))
    with os.fdopen(int(fd), "wb") as pipe:
        pipe.write(data)
