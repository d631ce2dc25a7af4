"""hpcgpu: Dask on HPC batch systems for GPU work.

One Dask worker per GPU, on SLURM, PBS Pro, LSF and Grid Engine, through the
scheduler's launcher or MPI.
"""

from __future__ import annotations

from hpcgpu.resources import GPUJobShape, NodeLimits

__all__ = ["GPUJobShape", "NodeLimits", "__version__"]
__version__ = "0.1.0"
