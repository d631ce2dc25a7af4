"""CPU jobs: dask-jobqueue's own job classes, submitted and watched the hpcgpu way.

Without a GPU request a job must be exactly what dask-jobqueue's would be, so its header
(``job_header``), its worker command (``--nthreads``, ``--nworkers``, ``--memory-limit``) and
the ``jobqueue.<config_name>`` configuration come from dask-jobqueue's ``SLURMJob``,
``PBSJob``, ``LSFJob`` and ``SGEJob``. hpcgpu adds what they lack: submission and
cancellation through :mod:`hpcgpu.system.commands` with the dialect's argv (so job states and
failure diagnostics work as for GPU jobs), ``job_script_epilogue``, and the network's
exports. One change to the worker line: ``python -m`` becomes ``python -c`` with code that
drops the working directory from ``sys.path`` (:func:`safe_worker_line`), as for GPU
workers: the job starts in the directory the cluster was made in, maybe a shared one.
"""

from __future__ import annotations

import inspect
import os
import shlex
import sys
from functools import lru_cache
from typing import Any

import dask.config

from hpcgpu.system.jobqueue import Job
from hpcgpu.cluster.batch.job import DialectSubmission, tls_settings
from hpcgpu.jobspec.dialects import Dialect, get_dialect
from hpcgpu.schedulers.registry import get_scheduler
from hpcgpu.system.pymain import SAFE_MAIN_AND_CHILDREN

__all__ = ["cpu_job_class", "cpu_error_log", "upstream_job_class", "safe_worker_line"]

#: dask-jobqueue after 0.9.0 renders job_script_epilogue itself (dask-jobqueue#677).
_UPSTREAM_EPILOGUE = "job_script_epilogue" in inspect.signature(Job.__init__).parameters
#: Lines newer dask-jobqueue adds, added here when the installed one lacks them:
#: the line they follow -> the line. SLURM's -N 1 is dask-jobqueue#680.
_NEWER_LINES = {"#SBATCH -n 1": "#SBATCH -N 1"}


@lru_cache(maxsize=None)
def cpu_job_class(scheduler: str) -> type:
    """hpcgpu's CPU job class for ``scheduler``: dask-jobqueue's job plus hpcgpu submission;
    ``ValueError`` where dask-jobqueue has none (GPU workers only there).

    >>> cpu_job_class("slurm").__name__, cpu_job_class("slurm").config_name
    ('SLURMJob', 'slurm')
    """
    import importlib

    upstream_job = get_scheduler(scheduler).cpu_job
    if upstream_job is None:
        raise ValueError(f"scheduler={scheduler!r} runs GPU workers only (dask-jobqueue has no "
                         "CPU job for it): ask for GPUs with gpus_per_node")
    module, name = upstream_job
    upstream = getattr(importlib.import_module(module), name)
    # Named as upstream's: its errors name f"{name}".replace("Job", "Cluster").
    return type(name, (CPUJobMixin, upstream),
                {"__doc__": f"{name} of dask-jobqueue, submitted through hpcgpu's dialect.",
                 "__module__": __name__})


def upstream_job_class(scheduler: str) -> type | None:
    """:func:`cpu_job_class` of ``scheduler``, or ``None`` where dask-jobqueue has no job
    for it (a cluster class's ``job_cls``).

    >>> upstream_job_class("pbs").__name__, upstream_job_class("flux")
    ('PBSJob', None)
    """
    return cpu_job_class(scheduler) if get_scheduler(scheduler).cpu_job is not None else None


class CPUJobMixin(DialectSubmission):
    """What hpcgpu adds to dask-jobqueue's job classes (put before them in the bases)."""

    def __init__(self, scheduler: str | None = None, name: str | None = None, *,
                 dialect: Dialect | None = None, environment: tuple[tuple[str, str], ...] = (),
                 job_script_epilogue: list[str] | None = None, **options: Any) -> None:
        self.dialect = dialect or get_dialect(self.config_name_scheduler())
        self.environment = tuple(environment)
        # Files only, as for GPU jobs (dask-jobqueue would put in-memory PEM text on the
        # worker's command line): the cluster writes them first (hpcgpu.cluster.batch.private).
        tls_settings(options.get("security"))
        self.job_script_epilogue = []  # SGEJob renders the script in __init__
        if _UPSTREAM_EPILOGUE:
            options["job_script_epilogue"] = job_script_epilogue
        super().__init__(scheduler=scheduler, name=name, **options)
        if not _UPSTREAM_EPILOGUE:
            self.job_script_epilogue = list(job_script_epilogue if job_script_epilogue is not None
                                            else dask.config.get(
                f"jobqueue.{self.config_name}.job-script-epilogue", None) or [])
        self.job_header = _with_newer_lines(self.job_header, self.job_directives_skip)
        self._command_template = safe_worker_line(self._command_template, *self._python_and_module(options))

    def _python_and_module(self, options: dict) -> tuple[str, str]:
        """The ``python`` and ``worker_command`` that dask-jobqueue's ``Job`` wrote, resolved
        as it resolves them."""
        python, module = options.get("python"), options.get("worker_command")
        if python is None:
            python = dask.config.get(f"jobqueue.{self.config_name}.python", None) or sys.executable
        if module is None:
            module = dask.config.get(f"jobqueue.{self.config_name}.worker-command", None)
        return str(python), str(module)

    @classmethod
    def config_name_scheduler(cls) -> str:
        """The scheduler this job class is for (its class-level ``config_name``)."""
        return cls.default_config_name()

    def job_script(self) -> str:
        """dask-jobqueue's script; exports before the worker command, epilogue after it."""
        script = super().job_script()
        if self.environment:
            exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in self.environment)
            script = script.replace(self._command_template, exports + "\n" + self._command_template)
        if self.job_script_epilogue:
            script = script.rstrip("\n") + "\n" + "\n".join(self.job_script_epilogue) + "\n"
        return script


def safe_worker_line(line: str, python: str, module: str) -> str:
    """dask-jobqueue's worker line, ``python -m module ...``, as ``python -c
    SAFE_MAIN_AND_CHILDREN module ...`` (:mod:`hpcgpu.system.pymain`: the standard library
    alone, the nodes' python may lack hpcgpu): ``-m`` put the job's working directory, where
    the cluster was made and maybe a shared directory, first on ``sys.path``, and so did the
    ``python -c`` of each worker process the nanny spawns. A line of another form (not
    dask-jobqueue 0.9's) is returned as it is.

    Examples
    --------
    >>> line = safe_worker_line("py -m distributed.cli.dask_worker tls://h:1 --nanny", "py", "distributed.cli.dask_worker")
    >>> line.replace(shlex.quote(SAFE_MAIN_AND_CHILDREN), "CODE")
    'py -c CODE distributed.cli.dask_worker tls://h:1 --nanny'
    >>> shlex.split(safe_worker_line("conda run -n e python -m m tls://h:1", "conda run -n e python", "m")) == [
    ...     "conda", "run", "-n", "e", "python", "-c", SAFE_MAIN_AND_CHILDREN, "m", "tls://h:1"]
    True
    """
    prefix = f"{python} -m {module}"
    if not line.startswith(prefix + " "):
        return line
    return f"{python} -c {shlex.quote(SAFE_MAIN_AND_CHILDREN)} {module}{line[len(prefix):]}"


def _with_newer_lines(header: str, skip: Any) -> str:
    r"""``header`` with the lines newer dask-jobqueue adds, unless present or skipped.

    >>> print(_with_newer_lines("#SBATCH -J w\n#SBATCH -n 1\n#SBATCH -t 10", ()))
    #SBATCH -J w
    #SBATCH -n 1
    #SBATCH -N 1
    #SBATCH -t 10
    >>> _with_newer_lines("#SBATCH -n 1", ["-N 1"])
    '#SBATCH -n 1'
    """
    lines = header.split("\n")
    for after, line in _NEWER_LINES.items():
        if line in lines or after not in lines or any(s in line for s in skip or ()):
            continue
        lines.insert(lines.index(after) + 1, line)
    return "\n".join(lines)


def cpu_error_log(scheduler: str, log_directory: str | None, job_name: str | None,
                  worker_name: str, job_id: str) -> str:
    """Where dask-jobqueue's directives send a CPU job's standard error.

    >>> cpu_error_log("slurm", "/logs", "dask-worker", "SLURMCluster-0", "42")
    '/logs/dask-worker-42.err'
    >>> cpu_error_log("sge", "/logs", "dask-worker", "SGECluster-0", "7")
    '/logs/dask-worker.o7'
    >>> cpu_error_log("pbs", "/logs", "dask-worker", "PBSCluster-0", "8.server")
    '/logs/8.server.ER'
    >>> cpu_error_log("pbs", None, "dask-worker", "PBSCluster-0", "8.server").rsplit("/", 1)[1]
    'dask-worker.e8'
    >>> cpu_error_log("lsf", "/logs", "dask-worker", "LSFCluster-0", "9")
    '/logs/LSFCluster-0-9.err'
    """
    directory = log_directory or os.getcwd()
    return get_scheduler(scheduler).cpu_error_log(directory, log_directory, job_name,
                                                  worker_name, job_id)
