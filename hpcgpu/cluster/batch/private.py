"""The cluster's private directory: its TLS credentials and job files, for the user's eyes only.

Batch systems keep copies of job scripts where other users may read them (Grid Engine's
execd: ``job_scripts/<id>``, mode 0755), so no job script carries key material. The
cluster writes its temporary certificate, key and CA to files (mode 0600) in a directory
only the user can enter (mode 0700) on the filesystem the nodes share, as dask-jobqueue's
``shared_temp_directory`` does; job scripts name those paths. The directory goes when the
cluster closes, is collected, or its process ends (:mod:`hpcgpu.cluster.shutdown`); a
process killed with SIGKILL cannot remove it, so the next cluster of the same user on the
same host removes the directories whose process is gone (each names its host and pid in
``owner``).

Layout: ``<parent>/.hpcgpu-<uid>/<cluster name>-<random>/``, where ``parent`` is
``shared_temp_directory`` (default: the log directory). The per-user level may already
exist; it is used only when it is the user's own with mode 0700. The parent must pass the
path rule of :mod:`hpcgpu.system.safedir` (:func:`hpcgpu.system.userdir.user_directory`): a
group-writable setgid project directory warns, one that other users can write is refused.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable

from hpcgpu.runner.security import write_private
from hpcgpu.system.userdir import owner_line, prune_stale, user_directory

__all__ = ["PrivateDirectory", "user_directory", "write_private", "worker_credentials", "prune_stale"]


def worker_credentials(security: Any, where: Callable[[], Path]) -> Any:
    """``security`` with its in-memory PEM texts (``Security.temporary()``) written as
    ``ca.pem``, ``cert.pem``, ``key.pem`` to the directory ``where()`` gives (called only
    then) and named by path; unchanged when it holds files already (or is ``None``).

    Examples
    --------
    >>> import tempfile
    >>> from distributed.security import Security
    >>> files = worker_credentials(Security.temporary(), lambda: Path(tempfile.mkdtemp()))
    >>> sorted(Path(v).name for v in files.get_tls_config_for_role("worker").values() if v)
    ['ca.pem', 'cert.pem', 'key.pem']
    >>> worker_credentials(None, lambda: 1 / 0) is None
    True
    """
    if security is None:
        return None
    worker = security.get_tls_config_for_role("worker")
    if not any(value and "\n" in value for value in worker.values()):
        return security
    directory = where()
    security = copy.copy(security)
    names = {"ca_file": ("ca.pem", "tls_ca_file"), "cert": ("cert.pem", "tls_worker_cert"),
             "key": ("key.pem", "tls_worker_key")}
    for key, value in worker.items():
        if value and "\n" in value:
            file, attribute = names[key]
            write_private(directory / file, value)
            setattr(security, attribute, str(directory / file))
    return security


class PrivateDirectory:
    """One cluster's private directory, made on first use, removed by :meth:`remove`.

    Parameters
    ----------
    parent : str
        Where the per-user directory goes (``shared_temp_directory`` or the log directory).
    name : str
        The cluster's name: the directory's prefix.
    field : str
        The option that chose ``parent``, for error messages.
    """

    def __init__(self, parent: str, name: str, field: str = "log_directory") -> None:
        self.parent = os.path.abspath(os.path.expanduser(os.path.expandvars(parent)))
        self.name, self.field = re.sub(r"[^\w.-]", "_", name), field
        self._path: Path | None = None
        self._fd = -1  # held: remove() finds the directory wherever it was moved

    @classmethod
    def of(cls, owner: Any, setup: Any, name: str) -> PrivateDirectory:
        """The directory of a cluster (``owner``) with ``setup``
        (:class:`~hpcgpu.cluster.batch.setup.ClusterSetup`), removed when ``owner`` is collected or
        the interpreter exits, also when its start fails
        (:func:`hpcgpu.cluster.shutdown.watch` adds SIGTERM and SIGHUP)."""
        field = ("log_directory" if setup.shared_temp_directory == setup.log_directory
                 else "shared_temp_directory")
        private = cls(setup.shared_temp_directory, name, field)
        weakref.finalize(owner, private.remove)
        return private

    @property
    def path(self) -> Path:
        """The directory (made now if not yet)."""
        if self._path is None:
            user = user_directory(self.parent, self.field)
            prune_stale(user)
            self._path = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=user))  # mode 0700
            self._fd = os.open(self._path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            write_private(self._path / "owner", owner_line())
        return self._path

    @property
    def made(self) -> str | None:
        """The directory's path if it was made, else ``None``."""
        return None if self._path is None else str(self._path)

    def remove(self) -> None:
        """Remove the directory and everything in it (never raises), also where another
        user (a group-writable parent's member) moved it; if it cannot be found, warn with
        what was left and where it was."""
        if self._path is None:
            return
        where = _current_path(self._fd, self._path)
        if where is not None:
            shutil.rmtree(where, ignore_errors=True)
        else:
            warnings.warn(f"hpcgpu could not remove the cluster's private directory "
                          f"{self._path} (credentials: ca.pem, cert.pem, key.pem): it was moved "
                          "out of reach; the certificate is useless once this cluster is gone",
                          UserWarning, stacklevel=2)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _current_path(fd: int, made: Path) -> Path | None:
    """Where the directory held open as ``fd`` is now: ``made``, or where it was moved
    (Linux's ``/proc/self/fd``); None if it cannot be found."""
    if fd < 0:
        return made
    held = os.fstat(fd)
    if held.st_nlink == 0:
        return made  # removed already: nothing left
    candidates = [made]
    try:
        candidates.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
    except OSError:
        pass
    for candidate in candidates:
        try:
            if os.path.samestat(held, os.lstat(candidate)):
                return candidate
        except OSError:
            continue
    return None
