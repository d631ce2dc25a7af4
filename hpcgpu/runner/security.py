"""Job-private TLS: one temporary certificate, written where every node of the job can read it.

distributed's :meth:`Security.temporary` makes the key and certificate in memory only;
workers started by a launcher on other nodes need files. They go into a directory that
only the job's user can enter (``0700``; files ``0600``), on the shared filesystem, and
are removed with it at the end of the job. The process that made them keeps the PEM texts
and its own client uses those (:func:`write_tls`): a ``ca.pem`` swapped on disk cannot
make it trust another scheduler.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from distributed.security import Security

from ..launchers import LAUNCHERS
from ..network.tls import temporary_security

__all__ = ["TLSFiles", "ENVIRONMENT_LAUNCHERS", "check_in_environment", "make_private_directory",
           "temporary_tls", "write_tls", "write_tls_files"]

#: Launchers that start every task with ``hpcgpu run``'s whole environment: with
#: ``--no-key-files`` the certificate and key travel there (PEM text), not in files.
ENVIRONMENT_LAUNCHERS = tuple(name for name, launcher in LAUNCHERS.items()
                              if launcher.passes_environment)


@dataclass(frozen=True)
class TLSFiles:
    """Paths of the CA, certificate and key (one certificate for every role, as in
    :meth:`Security.temporary`).

    Examples
    --------
    >>> files = TLSFiles("/j/ca.pem", "/j/cert.pem", "/j/key.pem")
    >>> sorted(files.environment())[:2]
    ['DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION', 'DASK_DISTRIBUTED__COMM__TLS__CA_FILE']
    >>> files.security().require_encryption
    True
    """

    ca_file: str
    cert: str
    key: str

    @classmethod
    def in_directory(cls, directory: str | os.PathLike) -> TLSFiles:
        """``ca.pem``, ``cert.pem`` and ``key.pem`` in ``directory``."""
        directory = Path(directory)
        return cls(str(directory / "ca.pem"), str(directory / "cert.pem"), str(directory / "key.pem"))

    def client_config(self) -> dict:
        """Dask configuration for a client in this process (``dask.config.set``)."""
        return {"distributed.comm.require-encryption": True, "distributed.comm.tls.ca-file": self.ca_file,
                "distributed.comm.tls.client.cert": self.cert, "distributed.comm.tls.client.key": self.key}

    def worker_args(self) -> dict:
        """The TLS keyword arguments of :class:`~hpcgpu.jobspec.worker_command.WorkerCommand`."""
        return {"tls_ca_file": self.ca_file, "tls_cert": self.cert, "tls_key": self.key}

    def security(self) -> Security:
        """A :class:`~distributed.security.Security` for a client (or any role)."""
        return Security(
            require_encryption=True, tls_ca_file=self.ca_file,
            tls_client_cert=self.cert, tls_client_key=self.key,
            tls_scheduler_cert=self.cert, tls_scheduler_key=self.key,
            tls_worker_cert=self.cert, tls_worker_key=self.key,
        )

    def environment(self) -> dict[str, str]:
        """Dask configuration as environment variables: ``Client()`` then finds them."""
        prefix = "DASK_DISTRIBUTED__COMM__"
        return {
            prefix + "REQUIRE_ENCRYPTION": "True",
            prefix + "TLS__CA_FILE": self.ca_file,
            prefix + "TLS__CLIENT__CERT": self.cert,
            prefix + "TLS__CLIENT__KEY": self.key,
            prefix + "TLS__WORKER__CERT": self.cert,
            prefix + "TLS__WORKER__KEY": self.key,
            prefix + "TLS__SCHEDULER__CERT": self.cert,
            prefix + "TLS__SCHEDULER__KEY": self.key,
        }


def check_in_environment(launcher: str, env: dict[str, str]) -> None:
    """Refuse ``--no-key-files`` where the launcher may not carry the environment to the tasks.

    Examples
    --------
    >>> check_in_environment("srun", {"SLURM_EXPORT_ENV": "ALL,A=1"})
    >>> check_in_environment("srun", {"SLURM_EXPORT_ENV": "NONE"})
    Traceback (most recent call last):
    ...
    ValueError: --no-key-files: srun passes no environment here (SLURM_EXPORT_ENV=NONE, from sbatch --export): the workers would not get the certificate; leave out --no-key-files (key files, 0600 in the job's 0700 directory), or submit with --export=ALL
    """
    if launcher not in ENVIRONMENT_LAUNCHERS:
        raise ValueError(
            f"--no-key-files: launcher {launcher!r} may not give every task hpcgpu run's "
            f"environment, where the certificate goes instead of a file; it works with "
            f"--launcher {' or '.join(ENVIRONMENT_LAUNCHERS)}, or leave out --no-key-files")
    refused = LAUNCHERS[launcher].environment_refused(env)
    if refused:
        raise ValueError(
            f"--no-key-files: {refused}: the workers would not get the certificate; leave out "
            "--no-key-files (key files, 0600 in the job's 0700 directory), or submit with "
            "--export=ALL")


def make_private_directory(path: str | os.PathLike) -> Path:
    """Create ``path`` (it must not exist) with mode 0700, and check that it is this user's
    own directory with that mode: another user who can write the parent must not have put
    a link or a directory of theirs there in between.

    Examples
    --------
    >>> import tempfile
    >>> make_private_directory(tempfile.mkdtemp() + "/d").name
    'd'
    """
    path = Path(path)
    path.mkdir(mode=0o700)  # fails if it exists: never reuse another run's directory
    os.chmod(path, 0o700, follow_symlinks=False)  # the umask may have removed bits: exact
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
        raise RuntimeError(f"{path} is not a directory of this user's with mode 0700 after it was "
                           "made: another user can write its parent; use a --work-dir of your own")
    return path


def write_private(path: str | os.PathLike, text: str) -> None:
    """Write a new file readable by the user only (mode 0600; an existing file is refused)."""
    # O_EXCL with O_NOFOLLOW: a new file of this user's, never through a link; 0600 from the start
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def temporary_tls() -> TLSFiles:
    """A temporary certificate (:func:`~hpcgpu.network.tls.temporary_security`), in memory: the fields hold the
    PEM text itself, which distributed loads as it loads files.

    Needs the ``cryptography`` package.

    Examples
    --------
    >>> tls = temporary_tls()
    >>> tls.ca_file.startswith("-----BEGIN CERTIFICATE-----"), "PRIVATE KEY" in tls.key
    (True, True)
    """
    try:
        temporary = temporary_security()
    except ImportError:
        raise ImportError(
            "TLS needs the 'cryptography' package, a dependency of hpcgpu: pip install "
            "cryptography (or reinstall hpcgpu), or turn TLS off (hpcgpu run --no-tls)"
        ) from None
    return TLSFiles(temporary.tls_ca_file, temporary.tls_client_cert, temporary.tls_client_key)


def write_tls_files(directory: str | os.PathLike) -> TLSFiles:
    """Make a temporary certificate (:func:`temporary_tls`) and write it into ``directory``."""
    pems = temporary_tls()
    files = TLSFiles.in_directory(directory)
    write_private(files.ca_file, pems.ca_file)
    write_private(files.cert, pems.cert)
    write_private(files.key, pems.key)
    return files


def write_tls(held) -> tuple[TLSFiles, TLSFiles]:
    """Make a temporary certificate and write it into ``held``
    (:class:`~hpcgpu.system.safedir.HeldDirectory`, relative to its descriptor); return the
    files (for other processes) and the PEM texts (for this one).

    Examples
    --------
    >>> import tempfile
    >>> from hpcgpu.system.safedir import HeldDirectory
    >>> with HeldDirectory(tempfile.mkdtemp(), "work") as held:
    ...     files, pems = write_tls(held)
    >>> Path(files.ca_file).read_text() == pems.ca_file
    True
    """
    pems = temporary_tls()
    files = TLSFiles(str(held.write_private("ca.pem", pems.ca_file)),
                     str(held.write_private("cert.pem", pems.cert)),
                     str(held.write_private("key.pem", pems.key)))
    return files, pems
