"""hpcgpu's own comm schemes, ``unix://`` and ``ucx+auth://``, in distributed's registry.

An installed hpcgpu reaches distributed through the entry points of its package metadata
(``distributed.comm.backends``, pyproject.toml). A source tree on ``PYTHONPATH`` (a
checkout, the lent GPU machines) has no metadata, and a process of it that meets such an
address fails with ``unknown address scheme``. So every process that hpcgpu starts
registers both before it listens or connects: :class:`~hpcgpu.cluster.local.LocalGPUCluster`
(its scheduler and nannies), each worker process (:mod:`hpcgpu.worker.preload` imports this
module), the batch scheduler (``--preload hpcgpu.network.schemes``) and the nannies of
``python -m hpcgpu.worker``. Registering imports no UCX: ``ucx+auth``'s backend is built
when first used. Importing this module registers them (what a preload needs: distributed
imports preloads before the process listens); importing hpcgpu does not.
"""

from __future__ import annotations

from hpcgpu.network import ucxauth, unixcomm

__all__ = ["register"]


def register() -> None:
    """Put ``unix`` and ``ucx+auth`` into distributed's registry of this process (each only
    where it is not there yet)."""
    unixcomm.register()
    ucxauth.register()


register()
