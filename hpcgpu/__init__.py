"""hpcgpu: Dask on HPC batch systems for GPU work.

One Dask worker per GPU, on SLURM, PBS Pro, LSF, Grid Engine and Flux, through the
scheduler's launcher or MPI. Names are imported lazily, so that ``import hpcgpu`` stays
cheap on a login node and loads nothing CUDA-related.
"""

from __future__ import annotations

from hpcgpu.system.lazy import lazy_getattr

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS = {
    "GPUJobShape": "hpcgpu.jobspec.resources",
    "NodeLimits": "hpcgpu.jobspec.resources",
    "GPUCluster": "hpcgpu.cluster",
    "SLURMCluster": "hpcgpu.cluster",
    "PBSCluster": "hpcgpu.cluster",
    "LSFCluster": "hpcgpu.cluster",
    "SGECluster": "hpcgpu.cluster",
    "FluxCluster": "hpcgpu.cluster",
    "LocalGPUCluster": "hpcgpu.cluster.local",
    "GPURunner": "hpcgpu.runner",
    "SLURMRunner": "hpcgpu.runner",  # dask_jobqueue.slurm.SLURMRunner's name (docs/migrating.md)
    "get_client": "hpcgpu.runner",
}

__all__ = ["__version__", *_EXPORTS]

__getattr__ = lazy_getattr(__name__, _EXPORTS)
