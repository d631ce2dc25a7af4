"""What every batch scheduler owns: its dialect and everything else looked up by its name.

A :class:`Scheduler` is stateless: one instance per scheduler, registered by name in
:mod:`hpcgpu.schedulers.registry`. Site options (a GPU directive, a parallel environment)
belong to its :class:`~hpcgpu.schedulers.dialect.Dialect`, made by :meth:`Scheduler.dialect`.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from hpcgpu.schedulers.dialect import Dialect

if TYPE_CHECKING:
    from hpcgpu.schedulers.arrays import ArrayRequest

__all__ = ["Scheduler", "int_or_none", "unique_lines"]


def int_or_none(value: str | None) -> int | None:
    """The leading whole number of an environment value (``4(x2)`` -> 4), else None.

    >>> int_or_none("4(x2)"), int_or_none(""), int_or_none(None)
    (4, None, None)
    """
    head = (value or "").split("(")[0].split(",")[0].strip()
    return int(head) if head.isdigit() else None


def unique_lines(path: str | None, column: int = 0) -> list[str]:
    """The distinct words in ``column`` of a host file (PBS_NODEFILE, PE_HOSTFILE), in order."""
    if not path or not Path(path).is_file():
        return []
    hosts: list[str] = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) > column and parts[column] not in hosts:
            hosts.append(parts[column])
    return hosts


class Scheduler:
    """One batch scheduler: rendering (its dialect), arrays, walltime signals, batch-mode
    detection, its job-id variable, account key, launchers and CPU workers.

    Subclasses set the class constants and override the methods whose default does not fit.
    """

    #: The name users give (``scheduler="slurm"``) and the registry's key.
    name: ClassVar[str]
    #: The class of its dialect: directives, submit/cancel/status argv and parsers.
    dialect_class: ClassVar[type[Dialect]]
    #: The ``jobqueue.<scheduler>`` key that holds the account (``account`` or ``project``).
    account_key: ClassVar[str] = "account"
    #: The variable that holds the job's id inside a job.
    job_id_variable: ClassVar[str]
    #: The first index of an array's range; None: no job arrays here.
    first_array_index: ClassVar[int | None] = None
    #: Whether its arrays take a throttle (at most T elements running: ``%T``, ``-tc T``).
    throttles_arrays: ClassVar[bool] = False
    #: The variable that tells an array element its index.
    array_index_variable: ClassVar[str | None] = None
    #: Whether every element's job-id variable holds the array's id (LSF, Grid Engine): the
    #: element's own id is then made of it and :attr:`array_index_variable`.
    element_id_from_index: ClassVar[bool] = False
    #: (argv, pattern) that read the site's limit on array elements; None: not readable.
    array_limit_query: ClassVar[tuple[tuple[str, ...], str] | None] = None
    #: The documented default limit where it is not read.
    default_array_limit: ClassVar[int | None] = None
    #: The launcher ``hpcgpu run`` uses across the nodes of a job.
    batch_launcher: ClassVar[str] = "direct"
    #: Whether a one-node job starts its workers directly (no launcher) in batch mode.
    batch_direct_on_one_node: ClassVar[bool] = False
    #: (module, class) of dask-jobqueue's job for CPU workers; None: no CPU workers.
    cpu_job: ClassVar[tuple[str, str] | None] = None
    #: Whether a CPU job's ``H:MM`` walltime means hours and minutes (LSF's ``-W``), not M:SS.
    walltime_hours_minutes: ClassVar[bool] = False
    #: The name of its cluster class in :mod:`hpcgpu.cluster`.
    cluster_class: ClassVar[str]
    #: The scheduler in words where it keeps a running job's output on the job's node and
    #: copies it to the log directory at the end ("" where the output is written in place).
    output_spooled_by: ClassVar[str] = ""
    #: Variables that name the cluster a job runs in (several clusters may share a home).
    cluster_variables: ClassVar[tuple[str, ...]] = ()
    #: The module whose ``offer(shape, dialect)`` and ``offers(shape, dialect)`` ask the
    #: scheduler what its queues' nodes offer, imported on first use; None: not asked.
    queries_module: ClassVar[str | None] = None

    def dialect(self, **site_options: Any) -> Dialect:
        """This scheduler's dialect with the site's options; unknown options raise
        ``ValueError`` naming the options it takes."""
        try:
            return self.dialect_class(**site_options)
        except TypeError:
            known = sorted(f for f in self.dialect_class.__dataclass_fields__)
            unknown = sorted(set(site_options) - set(known))
            raise ValueError(f"unknown {self.name} site option(s) {', '.join(unknown)}: "
                             f"known are {', '.join(known)}") from None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- walltime ----------------------------------------------------------------------------
    def preemption_lines(self, signal_before: int | None, requeue: bool) -> list[str]:
        """Directives (without prefix) that ask for a warning signal ``signal_before``
        seconds before the walltime (None: none) and, where asked, a requeue."""
        return []

    # -- arrays ------------------------------------------------------------------------------
    @property
    def has_arrays(self) -> bool:
        """Whether hpcgpu submits this scheduler's job arrays."""
        return self.first_array_index is not None

    def array_directives(self, request: ArrayRequest, job_name: str,
                         log_directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(skip, extra)``: substrings of the usual directives to drop, and the array's own
        directives (without prefix)."""
        raise ValueError(f"scheduler={self.name!r} has no job arrays here")

    def element_job_id(self, array_id: str, index: int) -> str:
        """The id of element ``index`` of the array ``array_id``, as the scheduler prints it."""
        return f"{array_id}[{index}]"

    def element_index(self, job_id: str) -> tuple[str, int | None]:
        """``(array id, index)`` of an element id; ``(job_id, None)`` for a plain job."""
        match = re.fullmatch(r"(\d+)\[(\d+)\](.*)", job_id)
        return (match.group(1), int(match.group(2))) if match else (job_id, None)

    def parse_array_limit(self, output: str) -> int | None:
        """The site's limit from :attr:`array_limit_query`'s output (None: no limit)."""
        if self.array_limit_query is None:
            return None
        match = re.search(self.array_limit_query[1], output, re.MULTILINE)
        value = int(match.group(1)) if match else 0
        return value or None

    # -- batch mode: the allocation this process runs in ---------------------------------------
    def in_job(self, env: Mapping[str, str]) -> bool:
        """Whether ``env`` is a process inside one of this scheduler's jobs."""
        return bool(env.get(self.job_id_variable))

    def job_id(self, env: Mapping[str, str]) -> str | None:
        """This job's id as the worker reports it (an array element's own)."""
        job_id = env.get(self.job_id_variable) or None
        index = env.get(self.array_index_variable or "", "")
        # index 0: no array (LSF's LSB_JOBINDEX outside one; arrays count from 1 here)
        if job_id and self.element_id_from_index and index.isdigit() and index != "0":
            return self.element_job_id(job_id, int(index))
        return job_id

    def hosts_and_cpus(self, env: Mapping[str, str]) -> tuple[list[str], int | None, int | None]:
        """(hosts, node count, cores on this node) as the scheduler states them."""
        return [], None, None

    def gpus_from_env(self, env: Mapping[str, str]) -> int | None:
        """GPUs per node from the scheduler's own variables (None: not stated; the caller
        then reads ``CUDA_VISIBLE_DEVICES``)."""
        return None

    def gpus_unknowable(self, env: Mapping[str, str]) -> str | None:
        """Why the GPUs cannot be counted here at all (no probe), or None."""
        return None

    def tasks(self, env: Mapping[str, str]) -> dict[str, int]:
        """Task layout fields of the allocation where GPUs are bound to tasks."""
        return {}

    # -- queues: what the nodes behind a queue offer, before submitting ------------------------
    def queue_offer(self, shape: Any, dialect: Any = None) -> Any:
        """A :class:`~hpcgpu.jobspec.queues.offer.QueueOffer` of ``shape.queue``'s nodes
        (None: this scheduler cannot be asked); raises ``QueryUnavailable`` where asking failed."""
        return None if self.queries_module is None else self._queries().offer(shape, dialect)

    def queue_offers(self, shape: Any, dialect: Any = None) -> list[Any] | None:
        """Every queue's offer, for the alternatives a refusal names (None: not listed)."""
        return None if self.queries_module is None else self._queries().offers(shape, dialect)

    def _queries(self) -> Any:
        # on first use: the queries import the command seam, which rendering never needs
        return importlib.import_module(self.queries_module or "")

    def check_cpu_queue(self, queue: str | None, cores: int, memory: int) -> None:
        """Refuse a CPU job (``cores``, ``memory`` bytes) its queue cannot run, where this
        scheduler can tell; nothing elsewhere."""

    def cluster_name(self, env: Mapping[str, str]) -> str | None:
        """The cluster this process's jobs run in, where the scheduler names it."""
        return next((env[v] for v in self.cluster_variables if env.get(v)), None)

    def ended_argv(self, job_id: str) -> list[str] | None:
        """A command whose answer tells whether job ``job_id`` has ended (None: none)."""
        return None

    def ended(self, returncode: int, stdout: str, stderr: str) -> bool:
        """Whether :meth:`ended_argv`'s answer says the job has ended."""
        return False

    def launcher_for_allocation(self, nodes: int) -> str:
        """The launcher ``hpcgpu run`` uses in a job of ``nodes`` nodes."""
        return "direct" if nodes == 1 and self.batch_direct_on_one_node else self.batch_launcher

    # -- CPU workers (dask-jobqueue's jobs) -------------------------------------------------------
    def cpu_error_log(self, directory: str, log_directory: str | None, job_name: str | None,
                      worker_name: str, job_id: str) -> str:
        """Where dask-jobqueue's directives send a CPU job's standard error (``directory``:
        ``log_directory`` or the working directory)."""
        return f"{directory}/{job_name}.e{job_id.split('.')[0]}"
