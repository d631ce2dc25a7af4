"""One batch job of GPU workers: dask-jobqueue's ``Job`` with hpcgpu's header and command.

dask-jobqueue's per-scheduler ``XJob`` classes build a one-node header and a
``dask worker --nworkers`` line; here the whole script comes from :func:`hpcgpu.jobspec.render.render`
(any number of nodes, one ``hpcgpu.worker`` per GPU through the launcher), and sbatch/qsub/bsub
and their cancel commands run through :mod:`hpcgpu.system.commands`, the one subprocess seam.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed.deploy.spec import ProcessInterface

from hpcgpu.system import commands
from hpcgpu.system.jobqueue import Job
from hpcgpu.cluster.batch.faults import submit_with_retries
from hpcgpu.jobspec.container import Container, worker_binds
from hpcgpu.jobspec.dialects import Dialect
from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.jobspec.launchers import Launcher
from hpcgpu.jobspec.render import render, worker_job_script
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = ["DialectSubmission", "GPUJob", "worker_suffixes"]

logger = logging.getLogger("hpcgpu.cluster")


def worker_suffixes(shape: GPUJobShape) -> list[str]:
    """The suffixes the workers of one job append to its name: ``-<node>-<gpu>``.

    >>> worker_suffixes(GPUJobShape.create(nodes=2, gpus_per_node=2))
    ['-0-0', '-0-1', '-1-0', '-1-1']
    """
    return [f"-{n}-{g}" for n in range(shape.nodes) for g in range(shape.gpus_per_node)]


class DialectSubmission:
    """Submit and cancel a job through the dialect's argv and :mod:`hpcgpu.system.commands`.

    Needs ``dialect``, ``name`` and ``job_script()`` on the job.
    """

    dialect: Dialect

    async def start(self) -> None:
        """Submit the script on the submit command's standard input (no file that another
        user could swap between write and read), remember the job id."""
        result = await submit_with_retries(self.dialect.submit_argv(), input=self.job_script())
        self.job_id = self.dialect.parse_job_id(result.stdout)
        logger.info("submitted job %s (%s) for workers %s-*", self.job_id,
                    self.dialect.name, self.name)
        await ProcessInterface.start(self)

    async def close(self) -> None:
        """Cancel the job (a job that is already gone is fine). Synchronous on purpose: at
        interpreter shutdown ``asyncio.to_thread``'s pool takes no more work."""
        if self.job_id and not getattr(self, "ended", False):
            commands.run(self.dialect.cancel_argv([self.job_id]), timeout=60, check=False)
            self.ended = True
            logger.info("cancelled job %s", self.job_id)
        await ProcessInterface.close(self)


class GPUJob(DialectSubmission, Job):
    """One job: ``shape.total_gpus`` workers, named ``<name>-<node>-<gpu>``.

    Parameters
    ----------
    scheduler : str
        The Dask scheduler's address.
    name : str
        The job's name in the cluster's spec; the workers' name prefix.
    shape, dialect, launcher
        What to ask for, in which scheduler's words, started how.
    security : distributed.Security or None
        With TLS files on disk (the cluster writes the temporary ones to its private
        directory, :mod:`hpcgpu.cluster.batch.private`): the script names their paths only.
    **options
        ``python``, ``log_directory``, ``interface``, ``protocol``, ``death_timeout``,
        ``local_directory``, ``worker_extra_args``, ``job_extra_directives``,
        ``job_directives_skip``, ``job_script_prologue``, ``job_script_epilogue``,
        ``shebang``, ``config_name``.
    environment : tuple of (name, value)
        Exported before the workers start: the network's ``UCX_*`` and
        ``DASK_DISTRIBUTED_UCXX__*`` variables (:func:`hpcgpu.network.job_environment`).
    scheduler_file, scheduler_lines
        Only for the job that runs the scheduler (``scheduler_in_job``): its workers read
        the address from ``scheduler_file``; ``scheduler_lines`` start the scheduler before
        them, and the last one waits for it after them.
    retire_before, lifetime_stagger : str or None
        Walltime-aware retirement of the workers (:class:`hpcgpu.jobspec.walltime.Retirement`).
    gpu_options : GPUWorkerOptions or None
        dask-cuda's worker keywords given to the cluster, rendered as the worker command's
        flags (None: none given, the command as without them).
    worker_http_address : str or None
        Where the workers' HTTP servers listen (None: loopback, :mod:`hpcgpu.worker.http`).
    container : Container or None
        Run the workers in this image, with the paths they need bound (:meth:`binds`).
    """

    config_name = "slurm"  # dask-jobqueue's fallback config section; hpcgpu passes its own

    def __init__(self, scheduler: str | None = None, name: str | None = None, *,
                 shape: GPUJobShape, dialect: Dialect, launcher: Launcher,
                 security: Any = None, protocol: str | None = None,
                 job_script_epilogue: list[str] | None = None,
                 environment: tuple[tuple[str, str], ...] = (),
                 scheduler_file: str | None = None, scheduler_lines: tuple[str, ...] = (),
                 retire_before: str | None = None, lifetime_stagger: str | None = None,
                 gpu_options: GPUWorkerOptions | None = None,
                 worker_http_address: str | None = None, container: Container | None = None,
                 **options: Any) -> None:
        self.shape, self.dialect, self.launcher = shape, dialect, launcher
        self.container = container
        self.http_address = worker_http_address
        self.retirement = {"retire_before": retire_before, "lifetime_stagger": lifetime_stagger}
        self.security_files = tls_settings(security)
        self.protocol = protocol
        self.gpu_options = gpu_options
        self.job_script_epilogue = list(job_script_epilogue or [])
        # The network's exports (UCX, distributed-ucxx), and for the job that runs the
        # scheduler: its scheduler file and the shell lines that start and wait for it.
        self.environment = tuple(environment)
        self.scheduler_file = scheduler_file
        self.scheduler_lines = tuple(scheduler_lines)
        self.options = dict(options)
        super().__init__(
            scheduler=scheduler or scheduler_file, name=name, cores=shape.cpus_per_node * shape.nodes,
            memory=str((shape.node_memory or 2**30) * shape.nodes),
            processes=shape.total_gpus, job_name=shape.job_name, **options,
        )
        # dask-jobqueue's attribute: the directives, one per line.
        self.job_header = "\n".join(self._script().directives())

    def worker_command(self) -> WorkerCommand:
        """The ``python -m hpcgpu.worker`` options every worker of this job gets."""
        memory = self.shape.gpu_memory
        from_file = self.scheduler_file is not None
        return WorkerCommand(
            scheduler=None if from_file else self.scheduler,
            scheduler_file=self.scheduler_file, name=str(self.name), nthreads=self.shape.cpus_per_gpu,
            memory_limit=str(memory) if memory else "auto",
            protocol=self.protocol.rstrip(":/") if self.protocol else None,
            interface=self.options.get("interface"),
            local_directory=self.options.get("local_directory"),
            http_address=self.http_address,
            death_timeout=int(self.options.get("death_timeout") or 120),
            walltime=self.shape.walltime, **self.retirement, gpu=self.gpu_options,
            extra=tuple(str(a) for a in self.options.get("worker_extra_args") or ()),
            **self.security_files,
        )

    def job_script(self) -> str:
        """The whole job script, rendered from the package's one template."""
        return render(self._script())

    def _script(self):
        return worker_job_script(
            self.shape, self.dialect, self.launcher, self.worker_command(),
            python=self.options.get("python") or "python3",
            log_directory=self.log_directory or ".",
            job_extra_directives=tuple(self.job_extra_directives or ()),
            job_directives_skip=tuple(self.job_directives_skip or ()),
            # The scheduler of ``scheduler_in_job`` starts at the end of the prologue.
            job_script_prologue=tuple(self._job_script_prologue or ()), start_lines=self.scheduler_lines[:-1],
            job_script_epilogue=tuple(self.job_script_epilogue) + self.scheduler_lines[-1:],
            environment=self.environment,
            shebang=self.shebang or "#!/usr/bin/env bash",
            container=self.container, binds=self.binds() if self.container else (),
        )

    def binds(self) -> tuple[str, ...]:
        """The host paths the workers read or write, for a container to bind: the log
        directory and those the worker command names (:func:`~hpcgpu.jobspec.container.worker_binds`)."""
        return worker_binds(self.worker_command(), self.log_directory or ".")


def tls_settings(security: Any) -> dict[str, str | None]:
    """The workers' TLS files, as options of the worker command (``--tls-cert ...``).

    A job script names files only, never key material: the cluster writes a temporary
    (in-memory) certificate to its private directory first
    (:func:`hpcgpu.cluster.batch.private.worker_credentials`); one that reaches a job unwritten
    is refused.

    Examples
    --------
    >>> from distributed.security import Security
    >>> tls_settings(Security(tls_ca_file="ca.pem", tls_worker_cert="c.pem",
    ...                       tls_worker_key="k.pem", require_encryption=True))
    {'tls_ca_file': 'ca.pem', 'tls_cert': 'c.pem', 'tls_key': 'k.pem'}
    >>> tls_settings(None)
    {}
    >>> tls_settings(Security.temporary())
    Traceback (most recent call last):
    ...
    ValueError: security: in-memory TLS credentials cannot go into a job script: write them \
to files first (hpcgpu.cluster.batch.private.worker_credentials)
    """
    if not security:
        return {}
    config = security.get_tls_config_for_role("worker")
    files = {"tls_ca_file": config.get("ca_file"), "tls_cert": config.get("cert"),
             "tls_key": config.get("key")}
    if any(value and "\n" in value for value in files.values()):
        raise ValueError("security: in-memory TLS credentials cannot go into a job script: "
                         "write them to files first "
                         "(hpcgpu.cluster.batch.private.worker_credentials)")
    return files
