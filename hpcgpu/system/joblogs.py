"""Reading a batch job's own stdout/stderr files back, safely, for ``cluster.get_logs()`` and
``hpcgpu logs``.

The log directory is checked first (:class:`~hpcgpu.system.safedir.HeldDirectory`: no other
user can swap what is below it) and held open; each file is opened relative to it with
``O_NOFOLLOW`` (a name, never a path: nothing outside the directory), must be a regular file
and must belong to this user (the scheduler writes a job's files as the job's owner, so
another user's job is refused). Only the last lines are read.

A file that is not there is explained: not written yet, kept on the node until the job ends
(PBS, LSF), pruned, or, where the directory is on a node-local filesystem and the job ran on
another host, not reachable from here.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from hpcgpu.system.safedir import HeldDirectory

__all__ = ["DEFAULT_LINES", "LogFile", "log_streams", "job_files", "read_tail", "read_log",
           "filesystem_type", "node_local_type", "missing_reason"]

#: Lines of each file shown unless asked otherwise.
DEFAULT_LINES = 100

#: Filesystems the compute nodes can share with this host (anything else is node-local).
SHARED_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "cephfs",
    "glusterfs", "fuse.glusterfs", "fuse.sshfs", "panfs", "wekafs", "9p", "fuse.cephfs",
    "orangefs", "pvfs2", "fuse.lizardfs", "fuse.moosefs", "afs", "virtiofs", "autofs",
})


@dataclass(frozen=True)
class LogFile:
    """One stream of a job as read back.

    Attributes
    ----------
    label : str
        ``stdout``, ``stderr`` or ``stdout+stderr`` (one file for both, Grid Engine ``-j y``).
    path : str
    text : str or None
        Its last lines; None where it could not be read.
    problem : str or None
        Why not (missing, not reachable from here, not yours...).
    """

    label: str
    path: str
    text: str | None
    problem: str | None = None

    def show(self) -> str:
        """The text, or the problem in its place."""
        return self.text if self.text is not None else f"({self.problem})"


def log_streams(error_log: str) -> list[tuple[str, str]]:
    """``(label, path)`` of a job's files from where its stderr goes: a ``.err`` file has its
    ``.out`` beside it; any other name holds both streams.

    Examples
    --------
    >>> log_streams("/l/hpcgpu-42.err")
    [('stdout', '/l/hpcgpu-42.out'), ('stderr', '/l/hpcgpu-42.err')]
    >>> log_streams("/l/hpcgpu.o7")
    [('stdout+stderr', '/l/hpcgpu.o7')]
    """
    if error_log.endswith(".err"):
        return [("stdout", error_log[:-4] + ".out"), ("stderr", error_log)]
    if error_log.endswith(".ER"):  # PBS -e dir/: dask-jobqueue's CPU jobs
        return [("stdout", error_log[:-3] + ".OU"), ("stderr", error_log)]
    return [("stdout+stderr", error_log)]


def _pbs_files(job_id: str) -> str:
    """The pattern of PBS's ``<id>[<i>].<server>.OU`` names for ``job_id`` as PBS prints it
    (``42``, ``42.server``, an array's ``42[].server``, an element's ``42[3]``); "(?!)"
    (no name) for an id of another form."""
    form = re.fullmatch(r"(\d+)(?:\[(\d*)\])?((?:\.[\w-]+)+)?", job_id)
    if form is None:
        return "(?!)"
    base, element, server = form.groups()
    index = (r"(?:\[(?P<p>\d+)\])?" if element is None else r"\[(?P<p>\d+)\]" if element == ""
             else rf"\[(?P<p>{element})\]")
    servers = re.escape(server) if server else r"(?:\.[\w-]+)*"
    return rf"{base}{index}{servers}\.(?:OU|ER)"


def job_files(names: list[str], job_id: str) -> list[str]:
    """The names among ``names`` that are job ``job_id``'s stdout/stderr as hpcgpu's and
    dask-jobqueue's directives name them (SLURM ``<name>-<id>.out/.err``, arrays
    ``<name>-<id>_<i>``, Grid Engine ``<name>.o<id>``, PBS ``<id>.OU``/``.ER``, LSF
    ``<id>.out``, ``<name>-<id>.err``), stdout first.

    Examples
    --------
    >>> job_files(["hpcgpu-42.err", "hpcgpu-42.out", "hpcgpu-421.out", "x.o42", "42.OU",
    ...            "hpcgpu-7_42.out", "notes.txt"], "42")
    ['42.OU', 'hpcgpu-42.out', 'x.o42', 'hpcgpu-42.err']
    >>> job_files(["hpcgpu-7_3.out", "hpcgpu-7_4.out"], "7_3")
    ['hpcgpu-7_3.out']

    An array's id (what ``sbatch`` or ``qsub`` printed) gives every element's files, element
    by element; PBS's ids with or without the server's name:

    >>> job_files(["hpcgpu-7_1.err", "hpcgpu-7_0.err", "hpcgpu-7_1.out", "hpcgpu-7_0.out"], "7")
    ['hpcgpu-7_0.out', 'hpcgpu-7_0.err', 'hpcgpu-7_1.out', 'hpcgpu-7_1.err']
    >>> pbs = ["8[1].pbs.OU", "8[0].pbs.OU", "9.pbs.OU", "9.pbs.ER", "89.pbs.OU"]
    >>> job_files(pbs, "8[].pbs"), job_files(pbs, "8[1]"), job_files(pbs, "9")
    (['8[0].pbs.OU', '8[1].pbs.OU'], ['8[1].pbs.OU'], ['9.pbs.OU', '9.pbs.ER'])
    """
    ident = re.escape(job_id)
    element = r"(?:_(?P<s>\d+))?" if "_" not in job_id else ""  # SLURM's array elements
    pattern = re.compile(rf"^(?:{ident}|.+-{ident}{element}|.+\.[oe]{ident}(?:\.\d+)?"
                         rf"|{_pbs_files(job_id)})(?:\.(?:out|err|OU|ER))?$")
    found = {n: pattern.match(n) for n in names if n != job_id and not n.endswith(".tmp")}
    index = {n: int(m.groupdict().get("s") or m.groupdict().get("p") or -1)
             for n, m in found.items() if m}
    return sorted(index, key=lambda n: (index[n], n.endswith((".err", ".ER")), n))


def read_tail(fd: int, lines: int | None) -> str:
    """The last ``lines`` lines (all where None) of the open file ``fd``, read from its end."""
    size = os.fstat(fd).st_size
    if lines is None:
        return os.pread(fd, size, 0).decode(errors="replace")
    block, data = 65536, b""
    while len(data) < size and data.count(b"\n") <= lines:
        start = max(0, size - len(data) - block)
        data = os.pread(fd, size - len(data) - start, start) + data
    text = data.decode(errors="replace")
    kept = text.splitlines()[-lines:] if lines else []
    return "\n".join(kept)


def read_log(held: HeldDirectory, name: str, lines: int | None) -> str:
    """Read the last lines of ``name`` in the checked, held directory: never through a
    link, only a regular file, only this user's.

    Raises ``FileNotFoundError`` when it is not there, ``PermissionError`` (with the reason)
    when it may not be read.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); _ = Path(d, "j-1.out").write_text("a\\nb\\nc\\n")
    >>> with HeldDirectory(d, "log_directory") as held:
    ...     read_log(held, "j-1.out", 2)
    'b\\nc'
    """
    if "/" in name or name in ("", ".", ".."):
        raise PermissionError(f"{name!r} is not a file name inside {held.path}")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=held.fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PermissionError(f"{held.path / name} is a symbolic link: not followed") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PermissionError(f"{held.path / name} is not a regular file")
        if info.st_uid != os.geteuid():
            raise PermissionError(f"{held.path / name} belongs to uid {info.st_uid}: "
                                  "only your own jobs' logs are shown")
        return read_tail(fd, lines)
    finally:
        os.close(fd)


def filesystem_type(path: str | os.PathLike, mountinfo: str | None = None) -> str:
    """The type of the filesystem ``path`` is on (the longest mount point above it), from
    ``/proc/self/mountinfo``; ``""`` where unknown.

    Examples
    --------
    >>> info = ("22 1 0:21 / / rw - ext4 /dev/sda1 rw\\n"
    ...         "40 22 0:40 / /home rw,relatime shared:5 - nfs4 srv:/home rw\\n")
    >>> filesystem_type("/home/u/.cache/hpcgpu/logs", info), filesystem_type("/tmp", info)
    ('nfs4', 'ext4')
    """
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    real, best, kind = os.path.realpath(path), "", ""
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, line.split(" - ", 1)[1].split()[0]
    return kind


def node_local_type(path: str | os.PathLike, mountinfo: str | None = None) -> str | None:
    """The filesystem type where ``path`` is on one that the compute nodes cannot share
    with this host (``tmpfs``, ``ext4``, ``xfs``...); None where it may be shared or is
    unknown.

    >>> node_local_type("/x", "1 0 0:1 / / rw - tmpfs none rw\\n")
    'tmpfs'
    >>> node_local_type("/x", "1 0 0:1 / / rw - lustre a@o2ib:/fs rw\\n") is None
    True
    """
    kind = filesystem_type(path, mountinfo)
    return kind if kind and kind not in SHARED_FILESYSTEMS else None


def _this_host(nodes: tuple[str, ...]) -> bool:
    names = {socket.gethostname(), socket.gethostname().split(".")[0], "localhost"}
    return bool(nodes) and all(n in names or n.split(".")[0] in names for n in nodes)


def missing_reason(path: str, state: str, nodes: tuple[str, ...] = (),
                   local_type: str | None = None, spooled_by: str = "") -> str:
    """Why a job's log file is not there, in words a user can act on; ``spooled_by``: the
    scheduler, in words, where it keeps a running job's output on the job's node
    (``Scheduler.output_spooled_by``).

    Examples
    --------
    >>> missing_reason("/l/j-1.out", "pending")
    '/l/j-1.out: not written yet (the job is pending)'
    >>> print(missing_reason("/l/7.pbs01.OU", "running", ("n1",), None, "PBS"))
    /l/7.pbs01.OU: not here until the job ends: PBS keeps a running job's output on its first node (n1) and copies it here when the job ends
    >>> print(missing_reason("/scratch/j-1.out", "running", ("node7",), "xfs"))
    /scratch/j-1.out: not reachable from here: /scratch is on a node-local filesystem (xfs) and \
the job ran on node7, not on this host; read it there (ssh node7 tail /scratch/j-1.out), or \
give log_directory a directory the nodes share (the default, ~/.cache/hpcgpu/logs, is in your \
home)
    """
    if state in ("submitting", "pending"):
        return f"{path}: not written yet (the job is {state})"
    if spooled_by and state in ("running", "retiring", "completing", "unknown"):
        return (f"{path}: not here until the job ends: {spooled_by} keeps a running "
                f"job's output on its first node ({nodes[0] if nodes else 'of the job'}) and "
                "copies it here when the job ends")
    if local_type and nodes and not _this_host(nodes):
        return (f"{path}: not reachable from here: {os.path.dirname(path)} is on a node-local "
                f"filesystem ({local_type}) and the job ran on {','.join(nodes)}, not on this "
                f"host; read it there (ssh {nodes[0]} tail {path}), or give log_directory a "
                "directory the nodes share (the default, ~/.cache/hpcgpu/logs, is in your home)")
    return (f"{path}: not there (removed, or pruned after hpcgpu.log-retention; or the "
            "scheduler could not write it)")
