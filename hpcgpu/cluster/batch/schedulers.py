"""The batch clusters: :class:`GPUCluster` with its scheduler chosen.

``XCluster.job_cls`` is dask-jobqueue's job class of that scheduler (hpcgpu's subclass), as in
dask-jobqueue, derived from ``scheduler_name`` by :class:`GPUCluster`; a GPU cluster's
``cluster.job_cls`` is :class:`~hpcgpu.cluster.batch.job.GPUJob`.
"""

from __future__ import annotations

from hpcgpu.cluster.batch.cluster import GPUCluster

__all__ = ["SLURMCluster", "PBSCluster", "LSFCluster", "SGECluster", "FluxCluster"]


class SLURMCluster(GPUCluster):
    """GPU workers on SLURM: ``sbatch`` jobs, ``srun`` one task per node.

    >>> SLURMCluster.scheduler_name
    'slurm'
    """

    scheduler_name = "slurm"


class PBSCluster(GPUCluster):
    """GPU workers on PBS Pro / OpenPBS: a ``select`` chunk per node; no launcher on one node,
    ``mpiexec`` one task per node across nodes."""

    scheduler_name = "pbs"


class LSFCluster(GPUCluster):
    """GPU workers on IBM Spectrum LSF: ``bsub`` with ``-gpu``, ``jsrun`` one task per node."""

    scheduler_name = "lsf"


class SGECluster(GPUCluster):
    """GPU workers on (Son of) Grid Engine: one slot per GPU in a parallel environment."""

    scheduler_name = "sge"


class FluxCluster(GPUCluster):
    """GPU workers on Flux: ``flux batch -N -n -c -g`` instances, ``flux run`` one task per node."""

    scheduler_name = "flux"  # GPU workers only: dask-jobqueue has no Flux job (job_cls GPUJob)
