"""One batch job of GPU workers: dask-jobqueue's ``Job`` with hpcgpu's header and command.

dask-jobqueue's per-scheduler ``XJob`` classes build a one-node header and a
``dask worker --nworkers`` line; here the whole script comes from :func:`hpcgpu.render.render`
(any number of nodes, one ``hpcgpu.worker`` per GPU through the launcher), and sbatch/qsub/bsub
and their cancel commands run through :mod:`hpcgpu.commands`, the one subprocess seam.
"""

from __future__ import annotations

import logging
import os
import shlex
import tempfile
from typing import Any

from distributed.deploy.spec import ProcessInterface

from hpcgpu import commands
from hpcgpu._jobqueue import Job
from hpcgpu.cluster.faults import submit_with_retries
from hpcgpu.dialects import Dialect
from hpcgpu.launchers import Launcher
from hpcgpu.render import render, worker_job_script
from hpcgpu.resources import GPUJobShape
from hpcgpu.worker_command import WorkerCommand

__all__ = ["DialectSubmission", "GPUJob", "worker_suffixes"]

logger = logging.getLogger("hpcgpu.cluster")


def worker_suffixes(shape: GPUJobShape) -> list[str]:
    """The suffixes the workers of one job append to its name: ``-<node>-<gpu>``.

    >>> worker_suffixes(GPUJobShape.create(nodes=2, gpus_per_node=2))
    ['-0-0', '-0-1', '-1-0', '-1-1']
    """
    return [f"-{n}-{g}" for n in range(shape.nodes) for g in range(shape.gpus_per_node)]


class DialectSubmission:
    """Submit and cancel a job through the dialect's argv and :mod:`hpcgpu.commands`.

    Needs ``dialect``, ``name``, ``log_directory`` and ``job_script()`` on the job;
    ``submitted_script()`` is what is submitted (by default the job script itself).
    """

    dialect: Dialect

    def submitted_script(self) -> str:
        """The text given to sbatch/qsub/bsub."""
        return self.job_script()

    async def start(self) -> None:
        """Write the script (mode 0600; removed once submitted: it may hold the TLS key),
        submit it, remember the job id."""
        text = self.submitted_script()
        fd, path = tempfile.mkstemp(prefix=f"{self.name}-", suffix=".sh",
                                    dir=self.log_directory or None)
        try:
            with os.fdopen(fd, "w") as file:
                file.write(text)
            result = await submit_with_retries(self.dialect.submit_argv(path))
        finally:
            os.unlink(path)
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
        With TLS files on disk (dask-jobqueue writes the temporary ones out).
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
        Walltime-aware retirement of the workers (:class:`hpcgpu.walltime.Retirement`).
    """

    config_name = "slurm"  # dask-jobqueue's fallback config section; hpcgpu passes its own

    def __init__(self, scheduler: str | None = None, name: str | None = None, *,
                 shape: GPUJobShape, dialect: Dialect, launcher: Launcher,
                 security: Any = None, protocol: str | None = None,
                 job_script_epilogue: list[str] | None = None,
                 environment: tuple[tuple[str, str], ...] = (),
                 scheduler_file: str | None = None, scheduler_lines: tuple[str, ...] = (),
                 retire_before: str | None = None, lifetime_stagger: str | None = None,
                 **options: Any) -> None:
        self.shape, self.dialect, self.launcher = shape, dialect, launcher
        self.retirement = {"retire_before": retire_before, "lifetime_stagger": lifetime_stagger}
        self.security_files, self._tls_environment = tls_settings(security)
        self.protocol = protocol
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
        self.job_header = "\n".join(self._script(secrets=False).directives())

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
            death_timeout=int(self.options.get("death_timeout") or 120),
            walltime=self.shape.walltime, **self.retirement,
            extra=tuple(str(a) for a in self.options.get("worker_extra_args") or ()),
            **self.security_files,
        )

    def job_script(self) -> str:
        """The whole job script, rendered from the package's one template (in-memory TLS
        credentials shown as a placeholder: they are added only to the submitted copy)."""
        return render(self._script(secrets=False))

    def submitted_script(self) -> str:
        """The job script with the in-memory TLS credentials (never written elsewhere)."""
        return render(self._script(secrets=True))

    def _script(self, secrets: bool):
        # Exported first: the scheduler of ``scheduler_in_job`` starts in the prologue.
        tls = tuple(f"export {name}={shlex.quote(value if secrets else HIDDEN)}"
                    for name, value in self._tls_environment)
        return worker_job_script(
            self.shape, self.dialect, self.launcher, self.worker_command(),
            python=self.options.get("python") or "python3",
            log_directory=self.log_directory or ".",
            job_extra_directives=tuple(self.job_extra_directives or ()),
            job_directives_skip=tuple(self.job_directives_skip or ()),
            job_script_prologue=(tls + tuple(self._job_script_prologue or ())
                                 + self.scheduler_lines[:-1]),
            job_script_epilogue=tuple(self.job_script_epilogue) + self.scheduler_lines[-1:],
            environment=self.environment,
            shebang=self.shebang or "#!/usr/bin/env bash",
        )

#: What :meth:`GPUJob.job_script` shows instead of an in-memory TLS credential.
HIDDEN = "<in memory: added to the submitted script only>"


def tls_settings(security: Any) -> tuple[dict[str, str | None], tuple[tuple[str, str], ...]]:
    """The workers' TLS: ``(files for the worker command, environment)``.

    Files a user gave stay files (``--tls-cert ...``). The temporary in-memory certificate
    (``Security.temporary()``, hpcgpu's default) is never written to the shared filesystem:
    it travels inside the submitted script as dask configuration in the environment
    (``DASK_DISTRIBUTED__COMM__TLS__*``), which only the job's user and the batch system
    can read; distributed loads it from memory (docs/reliability.md).

    Examples
    --------
    >>> from distributed.security import Security
    >>> tls_settings(Security(tls_ca_file="ca.pem", tls_worker_cert="c.pem",
    ...                       tls_worker_key="k.pem", require_encryption=True))[0]
    {'tls_ca_file': 'ca.pem', 'tls_cert': 'c.pem', 'tls_key': 'k.pem'}
    >>> files, environment = tls_settings(Security.temporary())
    >>> files, sorted(dict(environment))[:2]
    ({}, ['DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION', 'DASK_DISTRIBUTED__COMM__TLS__CA_FILE'])
    >>> tls_settings(None)
    ({}, ())
    """
    if not security:
        return {}, ()
    config = security.get_tls_config_for_role("worker")
    files = {"tls_ca_file": config.get("ca_file"), "tls_cert": config.get("cert"),
             "tls_key": config.get("key")}
    if not any(value and "\n" in value for value in files.values()):
        return files, ()
    from hpcgpu.runner.security import TLSFiles

    in_memory = TLSFiles(files["tls_ca_file"], files["tls_cert"], files["tls_key"])
    return {}, tuple(sorted(in_memory.environment().items()))
