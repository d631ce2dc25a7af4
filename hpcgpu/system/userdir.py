"""``<parent>/.hpcgpu-<uid>``: the per-user private directory of cluster and batch mode.

Cluster mode keeps each cluster's credentials and job files in
``<shared_temp_directory>/.hpcgpu-<uid>/<cluster>-<random>/``; ``hpcgpu run`` keeps its job
directory ``<jobid>-<random>/`` in ``<log directory>/.hpcgpu-<uid>/`` by default. The parent
passes :func:`hpcgpu.system.safedir.exposure` (no other user can replace a directory of its
path), except that a group-writable project directory only warns: it is a documented site
layout, and the warning says what its group's members can do. Each directory made in it
names its host, process and batch job in ``owner``; :func:`prune_stale` removes those whose
process or job is gone (a SIGKILL leaves them).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import warnings
from pathlib import Path
from typing import Callable

from hpcgpu.system.safedir import exposure

__all__ = ["user_directory", "owner_line", "prune_stale"]


def _check_parent(parent: str | os.PathLike, field: str) -> None:
    """Refuse a parent another user can replace; warn where only its group can."""
    found = exposure(parent)
    if found is None:
        return
    text = found.message(f"{field}={str(parent)!r}",
                         f"choose a {field} of your own, or one with the sticky bit (chmod +t)")
    if not found.group_only:
        raise ValueError(text)
    warnings.warn(text + " (docs/security.md: shared project directories)", UserWarning,
                  stacklevel=4)


def user_directory(parent: str | os.PathLike, field: str = "log_directory") -> Path:
    """``parent/.hpcgpu-<uid>``, made with mode 0700 if missing; refused (``ValueError``
    naming ``field`` and the fix) unless it is the user's own directory with mode 0700 and
    no other user can replace a directory above it.

    Examples
    --------
    >>> import tempfile
    >>> d = user_directory(tempfile.mkdtemp())
    >>> d.name == f".hpcgpu-{os.getuid()}", oct(stat.S_IMODE(d.stat().st_mode))
    (True, '0o700')
    >>> os.chmod(d, 0o755)
    >>> user_directory(d.parent)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: log_directory=...: .../.hpcgpu-... has mode 0755, not 0700: hpcgpu keeps \
credentials there (chmod 700 ...), or choose another log_directory
    """
    path = Path(parent) / f".hpcgpu-{os.getuid()}"
    _check_parent(parent, field)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # the umask may have removed bits, never added: make it exact
    except FileExistsError:
        pass
    except OSError as error:
        raise ValueError(f"{field}={str(parent)!r}: cannot make {path} ({error.strerror}): "
                         f"choose a {field} you can write to") from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ValueError(
            f"{field}={str(parent)!r}: {path} is not a directory of yours (owner uid "
            f"{info.st_uid}): someone else may read or change what hpcgpu would put there; "
            f"remove it, or choose another {field}")
    if stat.S_IMODE(info.st_mode) != 0o700:
        raise ValueError(
            f"{field}={str(parent)!r}: {path} has mode {stat.S_IMODE(info.st_mode):04o}, not "
            f"0700: hpcgpu keeps credentials there (chmod 700 {path}), or choose another {field}")
    return path


def owner_line(job: str | None = None) -> str:
    """What ``owner`` holds: this host and process, and the batch job (``slurm:42``) if any.

    >>> owner_line("slurm:42").split()[1:] == [str(os.getpid()), "slurm:42"]
    True
    """
    return " ".join([socket.gethostname(), str(os.getpid()), *([job] if job else [])]) + "\n"


def prune_stale(user: Path, job_gone: Callable[[str], bool] | None = None) -> list[Path]:
    """Remove the directories in ``user`` whose ``owner`` process on this host is gone (a
    client killed with SIGKILL), or whose batch job ``job_gone`` says has ended; those of
    other hosts and of live processes and jobs stay.

    Examples
    --------
    >>> import tempfile
    >>> user = Path(tempfile.mkdtemp())
    >>> for name, pid, job in (("gone", 2**22 + 1, ""), ("alive", os.getpid(), ""),
    ...                        ("elsewhere", 1, " slurm:7"), ("ended", 1, " slurm:8")):
    ...     (user / name).mkdir()
    ...     host = socket.gethostname() if job == "" else "other-host"
    ...     _ = (user / name / "owner").write_text(f"{host} {pid}{job}")
    >>> removed = prune_stale(user, job_gone=lambda job: job == "slurm:8")
    >>> sorted(p.name for p in removed), sorted(p.name for p in user.iterdir())
    (['ended', 'gone'], ['alive', 'elsewhere'])
    """
    import psutil

    host, removed = socket.gethostname(), []
    for directory in user.iterdir():
        try:
            owner_host, pid, *job = (directory / "owner").read_text().split()
        except (OSError, ValueError):
            continue
        if owner_host == host:  # its process tells: no need to ask the batch system
            gone = not psutil.pid_exists(int(pid))
        else:
            gone = bool(job) and job_gone is not None and job_gone(job[0])
        if gone:
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed
