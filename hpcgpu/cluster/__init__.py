"""Cluster mode: Dask on a batch scheduler from a notebook, one worker per GPU.

``SLURMCluster(gpus_per_node=4, ...)``, ``cluster.scale(gpus=8)``, ``cluster.adapt(...)``;
see docs/cluster.md. Names are imported lazily, as in :mod:`hpcgpu`: ``hpcgpu jobscript``
uses :mod:`hpcgpu.cluster.batch.setup` without loading distributed's scheduler.

:mod:`hpcgpu.cluster.batch` holds the batch clusters, :mod:`hpcgpu.cluster.local` the local
one; the modules here serve any cluster (the clean end, start errors, workers' versions).
"""

from __future__ import annotations

from hpcgpu.system.lazy import lazy_getattr

#: public name -> module that defines it
_EXPORTS = {
    "GPUCluster": "hpcgpu.cluster.batch.cluster",
    "GPUJob": "hpcgpu.cluster.batch.job",
    "JobInfo": "hpcgpu.cluster.batch.job_table",
    "SLURMCluster": "hpcgpu.cluster.batch.schedulers",
    "PBSCluster": "hpcgpu.cluster.batch.schedulers",
    "LSFCluster": "hpcgpu.cluster.batch.schedulers",
    "SGECluster": "hpcgpu.cluster.batch.schedulers",
    "FluxCluster": "hpcgpu.cluster.batch.schedulers",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
