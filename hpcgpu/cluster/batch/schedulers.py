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


#: What ``help(SLURMCluster)`` says of dask-jobqueue's job arguments, where its scheduler has
#: dask-jobqueue CPU jobs: a dask-jobqueue user looks for ``cores`` there.
CPU_PARAMETERS = """

    Parameters
    ----------
    gpus_per_node, nodes, cpus_per_gpu, memory_per_gpu, walltime, queue, account
        GPU workers, one per GPU (:class:`~hpcgpu.cluster.batch.cluster.GPUCluster` has every
        keyword).
    cores : int
        dask-jobqueue's CPU workers instead, as with dask-jobqueue's {name}: cores per job.
        With ``memory``, ``processes``, ``job_cpu``, ``job_mem`` and its other job arguments
        (no ``gpus_per_node``), its own job class renders the script (docs/migrating.md).
    memory : str
        Memory per CPU job, as in dask-jobqueue.
    processes : int
        Worker processes per CPU job, as in dask-jobqueue.
"""

for _cls in (SLURMCluster, PBSCluster, LSFCluster, SGECluster):
    if _cls.__doc__ is not None:  # None under python -OO
        _cls.__doc__ += CPU_PARAMETERS.format(name=_cls.__name__)
