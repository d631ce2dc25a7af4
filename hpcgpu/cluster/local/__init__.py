"""The local cluster: ``LocalGPUCluster``, one GPU worker per GPU of this host, or CPU workers.

:mod:`hpcgpu.cluster.local.cluster` holds the cluster, :mod:`hpcgpu.cluster.local.spec` the
pure sorting of ``LocalCUDACluster``'s and ``LocalCluster``'s keywords. The name is imported
lazily, as in :mod:`hpcgpu`: importing the keyword tables loads no distributed scheduler.
"""

from __future__ import annotations

from hpcgpu.system.lazy import lazy_getattr

#: public name -> module that defines it
_EXPORTS = {
    "LocalGPUCluster": "hpcgpu.cluster.local.cluster",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
