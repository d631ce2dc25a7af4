"""``cluster.get_logs()`` (and ``cluster.logs()``): per job, the files the batch scheduler
wrote (its stdout and stderr), then each of its workers' Dask log; first the cluster's and
the Dask scheduler's own logs, as distributed's clusters return them.

Jobs that ended are included while their files are kept (``hpcgpu.log-retention`` in the
default log directory). Files are read by :mod:`hpcgpu.system.joblogs` (checked directory,
``O_NOFOLLOW``, this user's files only, the last lines).
"""

from __future__ import annotations

import os
from typing import Any

from distributed.utils import Log, Logs

from hpcgpu.system.joblogs import (DEFAULT_LINES, LogFile, log_streams, missing_reason,
                                   node_local_type, read_log)
from hpcgpu.schedulers.registry import get_scheduler, scheduler_names
from hpcgpu.system.safedir import HeldDirectory

__all__ = ["DEFAULT_LINES", "job_log_files", "gather_logs"]


def _spooled_by(scheduler: str) -> str:
    return get_scheduler(scheduler).output_spooled_by if scheduler in scheduler_names() else ""


def job_log_files(error_log: str, state: str, nodes: tuple[str, ...],
                  lines: int | None = DEFAULT_LINES, scheduler: str = "") -> list[LogFile]:
    r"""The job's stdout/stderr files read back (see :func:`hpcgpu.system.joblogs.read_log`);
    a file not there says why (:func:`hpcgpu.system.joblogs.missing_reason`).

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); _ = open(f"{d}/hpcgpu-7.err", "w").write("a\nb\n")
    >>> [(f.label, f.text, f.problem) for f in job_log_files(f"{d}/hpcgpu-7.err", "pending", ())]
    ... # doctest: +ELLIPSIS
    [('stdout', None, '/.../hpcgpu-7.out: not written yet (the job is pending)'), ('stderr', 'a\nb', None)]
    """
    directory = os.path.dirname(error_log) or "."
    out = []
    try:
        held = HeldDirectory(directory, "log_directory")
    except (ValueError, OSError) as error:
        why = str(error) if isinstance(error, ValueError) else f"{directory}: {error.strerror}"
        return [LogFile(label, path, None, why) for label, path in log_streams(error_log)]
    with held:
        for label, path in log_streams(error_log):
            try:
                out.append(LogFile(label, path, read_log(held, os.path.basename(path), lines)))
            except FileNotFoundError:
                why = missing_reason(path, state, nodes, node_local_type(directory),
                                     _spooled_by(scheduler))
                out.append(LogFile(label, path, None, why))
            except OSError as error:
                out.append(LogFile(label, path, None, str(error)))
    return out


def _tail(newest_first: list, lines: int | None) -> str:
    """Dask's in-memory log (``(level, line)``, newest first, as distributed returns it):
    its last ``lines`` lines in the order they were written, as in a file."""
    kept = newest_first if lines is None else newest_first[:lines]
    return "\n".join(line for _, line in reversed(kept))


async def gather_logs(cluster: Any, *, cluster_log: bool = True, scheduler: bool = True,
                      workers: Any = True, jobs: bool = True,
                      lines: int | None = DEFAULT_LINES) -> Logs:
    """The logs of a :class:`~hpcgpu.cluster.batch.base.BatchCluster`, in order: ``Cluster``,
    ``Scheduler``, then for each job (oldest first, ended ones included) ``job NAME (ID)
    stdout`` / ``stderr`` and ``worker WORKER`` for each of its connected workers."""
    logs = Logs()
    if cluster_log:
        entries = [line for _, line in cluster._cluster_manager_logs]
        logs["Cluster"] = Log("\n".join(entries[-lines:] if lines else entries))
    if scheduler and cluster.scheduler_comm is not None:
        logs["Scheduler"] = Log(_tail(await cluster.scheduler_comm.get_logs(n=lines), lines))
    by_name: dict[str, str] = {}
    if workers:
        asked = None if workers is True else list(workers)
        found = await cluster.scheduler_comm.worker_logs(n=lines, workers=asked)
        names = {a: str(i.get("name", a))
                 for a, i in cluster.scheduler_info.get("workers", {}).items()}
        by_name = {names.get(addr, addr): _tail(entries, lines) for addr, entries in found.items()}
    for record in list(cluster.fleet.records.values()) if jobs or by_name else []:
        if jobs and record.job_id:
            label = f"job {record.name} ({record.job_id})"
            files = job_log_files(cluster.monitor.error_log(record), record.state,
                                  record.nodes, lines, cluster.monitor.dialect.name)
            for file in files:
                logs[f"{label} {file.label}"] = Log(f"# {file.path}\n{file.show()}")
        for name in sorted(n for n in by_name if cluster.job_key(n) == record.name):
            logs[f"worker {name}"] = Log(by_name.pop(name))
    for name, text in by_name.items():  # a worker no job of this cluster started
        logs[f"worker {name}"] = Log(text)
    return logs
