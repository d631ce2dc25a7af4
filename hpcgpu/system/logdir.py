"""Where cluster mode writes its job logs by default, and how old ones go away.

Job logs used to land in ``./hpcgpu-logs`` of whatever directory the notebook ran in, and
piled up there. The default is now one directory per user, outside the working directory,
on the filesystem the nodes share with the login node (the home directory):
``$XDG_CACHE_HOME/hpcgpu/logs`` (``~/.cache/hpcgpu/logs``). Job logs in it (``*.out``,
``*.err``, PBS/SGE ``*.o<id>``/``*.e<id>``, PBS ``<id>.OU``/``<id>.ER``) older than ``hpcgpu.log-retention`` (7 days)
are removed when a cluster starts. A ``log_directory`` you choose is never pruned.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

__all__ = ["default_log_directory", "prune_job_logs", "is_job_log"]

_JOB_LOG = re.compile(r"(\.(out|err|OU|ER)|\.[oe]\d+(\.\d+)?)$")  # .OU/.ER: PBS -o dir/


def default_log_directory(environ: dict | None = None) -> str:
    """``$XDG_CACHE_HOME/hpcgpu/logs``, or ``~/.cache/hpcgpu/logs``.

    >>> default_log_directory({"XDG_CACHE_HOME": "/c", "HOME": "/h"})
    '/c/hpcgpu/logs'
    >>> default_log_directory({"HOME": "/h"})
    '/h/.cache/hpcgpu/logs'
    """
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hpcgpu", "logs")


def is_job_log(name: str) -> bool:
    """A batch job's stdout/stderr file, as hpcgpu's job scripts name them.

    >>> [is_job_log(n) for n in ("hpcgpu-17.err", "3.out", "hpcgpu.o12", "hpcgpu.e12.3", "key.pem")]
    [True, True, True, True, False]
    >>> [is_job_log(n) for n in ("37.vm-pbs.OU", "8.server.ER", "12[3].server.OU")]
    [True, True, True]
    """
    return bool(_JOB_LOG.search(name))


def prune_job_logs(directory: str | os.PathLike, max_age: float, now: float | None = None) -> list[Path]:
    """Remove the job logs in ``directory`` not modified for ``max_age`` seconds; return them.

    Other files (certificates, scheduler files) are left alone; errors (a file another
    cluster removed first) are ignored.
    """
    now = time.time() if now is None else now
    removed = []
    for path in Path(directory).iterdir():
        try:
            if is_job_log(path.name) and path.is_file() and now - path.stat().st_mtime > max_age:
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed
