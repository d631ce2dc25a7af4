"""The CPU job shape: dask-jobqueue's ``cores``/``processes``/``memory`` as one frozen value.

A CPU job is what dask-jobqueue submits: one batch job of ``cores`` cores and ``memory``
bytes on one node, running ``processes`` Dask workers of ``cores // processes`` threads and
``memory / processes`` bytes each. :class:`CPUJobShape` holds those numbers for scaling
(``scale(cores=, memory=)``), whole-job retirement and the worker names; the script itself
comes from dask-jobqueue's own job classes (:mod:`hpcgpu.cluster.batch.cpu_job`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dask.utils import format_bytes

__all__ = ["CPUJobShape"]


@dataclass(frozen=True)
class CPUJobShape:
    """What one CPU batch job asks for, in dask-jobqueue's terms.

    Attributes
    ----------
    cores : int
        Cores of the whole job (dask-jobqueue's ``cores``).
    processes : int
        Dask workers in the job (``--nworkers``).
    memory : int
        Bytes of the whole job (dask-jobqueue's ``memory``).
    job_name : str or None
        The scheduler's job name (``-J``, ``-N``).
    walltime : int or None
        Seconds, where the walltime could be read.

    Examples
    --------
    >>> shape = CPUJobShape(cores=8, processes=4, memory=28 * 10**9)
    >>> shape.worker_process_threads, shape.worker_process_memory, shape.workers_per_job
    (2, '6.52GiB', 4)
    >>> shape.worker_suffixes()
    ['-0', '-1', '-2', '-3']
    >>> CPUJobShape(cores=8, processes=1, memory=2**30).worker_suffixes() is None
    True
    """

    cores: int
    processes: int
    memory: int
    job_name: str | None = None
    walltime: int | None = None

    def __post_init__(self) -> None:
        for name in ("cores", "processes", "memory"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number of at least 1")
        if self.processes > self.cores:
            raise ValueError(
                f"processes={self.processes} is more than cores={self.cores}: each worker "
                f"needs a core, use processes<={self.cores}"
            )

    @property
    def workers_per_job(self) -> int:
        """Dask workers in one job."""
        return self.processes

    @property
    def cores_per_job(self) -> int:
        """Cores of one job (what ``scale(cores=)`` divides by)."""
        return self.cores

    @property
    def memory_per_job(self) -> int:
        """Bytes of one job (what ``scale(memory=)`` divides by)."""
        return self.memory

    @property
    def worker_process_threads(self) -> int:
        """Threads of each worker: ``cores // processes``, as dask-jobqueue."""
        return self.cores // self.processes

    @property
    def worker_process_memory(self) -> str:
        """Memory limit of each worker as dask-jobqueue writes it (``format_bytes``)."""
        return format_bytes(self.memory / self.processes).replace(" ", "")

    @property
    def name_levels(self) -> int:
        """How many ``-<i>`` parts a worker name adds to its job's name."""
        return 1 if self.processes > 1 else 0

    def worker_suffixes(self) -> list[str] | None:
        """The names ``dask worker --nworkers`` gives the workers after the job's name
        (``None``: one worker, named as the job)."""
        if self.processes == 1:
            return None
        return [f"-{i}" for i in range(self.processes)]
