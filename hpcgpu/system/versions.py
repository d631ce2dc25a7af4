"""The versions a client and its workers must share: hpcgpu, dask and distributed.

A worker in a container image (:mod:`hpcgpu.jobspec.container`) runs the image's packages,
not the client's. Each worker reports :func:`local_versions` when it registers (its
preload, in ``WorkerState.extra["hpcgpu"]["versions"]``); the cluster compares them with
its own as the worker joins (:func:`mismatch`). Package metadata, not imports: reading a
version costs no import of the package.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

__all__ = ["CHECKED", "local_versions", "mismatch", "worker_mismatches"]

#: The packages whose versions must match between the client and every worker.
CHECKED = ("hpcgpu", "dask", "distributed")


def local_versions() -> dict[str, str]:
    """This process's versions of :data:`CHECKED` (``"none"`` for one not installed).

    >>> sorted(local_versions())
    ['dask', 'distributed', 'hpcgpu']
    """
    return {name: _version(name) for name in CHECKED}


@cache  # read once per process: a fork server's workers inherit it (hpcgpu.worker._forkready)
def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def mismatch(mine: dict[str, str], theirs: dict[str, str] | None, who: str) -> str | None:
    """The message for a worker (``who``) whose versions differ from this process's, with
    both; None when they match. ``theirs`` None: the worker reported none (an hpcgpu older
    than this check, or not hpcgpu's worker at all).

    Examples
    --------
    >>> mine = {"hpcgpu": "0.2.0", "dask": "2026.7.1", "distributed": "2026.7.1"}
    >>> mismatch(mine, dict(mine), "worker 'w-0'") is None
    True
    >>> print(mismatch(mine, {**mine, "hpcgpu": "0.1.0", "dask": "2026.5.0"}, "worker 'w-0'"))
    worker 'w-0' runs other versions than this client: hpcgpu 0.1.0 (client 0.2.0), dask 2026.5.0 \
(client 2026.7.1): install the client's versions in the workers' environment or image, or run the \
client from the image
    >>> mismatch(mine, None, "worker 'w-0'").split(":")[0]
    "worker 'w-0' reported no versions (an hpcgpu from before this check, or another worker program)"
    """
    if theirs is None:
        return (f"{who} reported no versions (an hpcgpu from before this check, or "
                f"another worker program): install hpcgpu {mine.get('hpcgpu')} in the workers' environment or image")
    differ = [f"{name} {theirs.get(name, 'none')} (client {mine[name]})"
              for name in CHECKED if name in mine and theirs.get(name, "none") != mine[name]]
    if not differ:
        return None
    return (f"{who} runs other versions than this client: {', '.join(differ)}: install the "
            "client's versions in the workers' environment or image, or run the client from the image")


def worker_mismatches(mine: dict[str, str], workers: dict) -> dict[str, str]:
    """Worker name -> :func:`mismatch` message, for the hpcgpu workers of a scheduler's
    ``workers`` (address -> identity, as ``Client.scheduler_info()`` gives them) whose
    versions differ; workers without hpcgpu's record (not hpcgpu's worker) are left out.

    >>> mine = {"hpcgpu": "0.2.0", "dask": "1", "distributed": "1"}
    >>> worker_mismatches(mine, {"tcp://a:1": {"name": "w", "hpcgpu": {"versions": {**mine, "dask": "2"}}},
    ...                          "tcp://a:2": {"name": "cpu"}})
    {'w': "worker 'w' at tcp://a:1 runs other versions than this client: dask 2 (client 1): install \
the client's versions in the workers' environment or image, or run the client from the image"}
    """
    found = {}
    for address, info in dict(workers).items():
        ours = info.get("hpcgpu")
        name = str(info.get("name"))
        message = mismatch(mine, ours.get("versions"), f"worker {name!r} at {address}") \
            if isinstance(ours, dict) else None
        if message:
            found[name] = message
    return found
