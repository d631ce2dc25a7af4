"""The four clusters: :class:`GPUCluster` with its scheduler chosen."""

from __future__ import annotations

from hpcgpu.cluster.cluster import GPUCluster

__all__ = ["SLURMCluster", "PBSCluster", "LSFCluster", "SGECluster"]


class SLURMCluster(GPUCluster):
    """GPU workers on SLURM: ``sbatch`` jobs, ``srun`` one task per GPU.

    >>> SLURMCluster.scheduler_name
    'slurm'
    """

    scheduler_name = "slurm"


class PBSCluster(GPUCluster):
    """GPU workers on PBS Pro / OpenPBS: ``select`` chunks, ``mpiexec`` one rank per GPU."""

    scheduler_name = "pbs"


class LSFCluster(GPUCluster):
    """GPU workers on IBM Spectrum LSF: ``bsub`` with ``-gpu``, ``jsrun`` one task per GPU."""

    scheduler_name = "lsf"


class SGECluster(GPUCluster):
    """GPU workers on (Son of) Grid Engine: one slot per GPU in a parallel environment."""

    scheduler_name = "sge"
