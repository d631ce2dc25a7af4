"""Cluster mode: Dask on a batch scheduler from a notebook, one worker per GPU.

``SLURMCluster(gpus_per_node=4, ...)``, ``cluster.scale(gpus=8)``, ``cluster.adapt(...)``;
see docs/cluster.md. Names are imported lazily, as in :mod:`hpcgpu`: ``hpcgpu jobscript``
uses :mod:`hpcgpu.cluster.setup` without loading distributed's scheduler.
"""

from __future__ import annotations

from hpcgpu.system.lazy import lazy_getattr

#: public name -> module that defines it
_EXPORTS = {
    "GPUCluster": "hpcgpu.cluster.cluster",
    "GPUJob": "hpcgpu.cluster.job",
    "JobInfo": "hpcgpu.cluster.job_table",
    "SLURMCluster": "hpcgpu.cluster.schedulers",
    "PBSCluster": "hpcgpu.cluster.schedulers",
    "LSFCluster": "hpcgpu.cluster.schedulers",
    "SGECluster": "hpcgpu.cluster.schedulers",
    "FluxCluster": "hpcgpu.cluster.schedulers",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
