"""Directories no other user can change: the one rule for every file that decides where a
process connects (scheduler files, TLS files, job directories).

A file is only as safe as the directories above it: whoever may rename an entry of any of
them can put a directory of their own in its place, and every process that reads by path
then reads theirs. So a path is accepted only if every directory from ``/`` down to it
either cannot be written by anyone but the user and root, or has the sticky bit (``/tmp``,
mode 1777) and the next component belongs to the user or root (then only its owner may
rename it). :func:`exposure` finds the first directory that breaks the rule;
:func:`check_private_path` refuses it, naming the fix; :class:`HeldDirectory` keeps a checked
directory open and makes what goes into it relative to the open descriptor.

Group-writable directories count as writable by others unless the group has no member but
the user (a "user private group").
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from hpcgpu.system.posixacl import acl_writers

__all__ = ["Exposure", "exposure", "check_private_path", "HeldDirectory", "PRIVATE_FIX"]

#: How to get a directory that passes, for messages.
PRIVATE_FIX = "use a directory only you can write (mkdir -m 700 ~/hpcgpu-work)"


@dataclass(frozen=True)
class Exposure:
    """A directory through which another user can change what lies below it.

    Attributes
    ----------
    path : str
        The directory.
    reason : str
        Who can change it and how, e.g. ``is writable by every user (mode 0777)``.
    group_only : bool
        Only members of its group can (a shared project directory: some callers warn).
    """

    path: str
    reason: str
    group_only: bool = False

    def message(self, subject: str, fix: str = PRIVATE_FIX) -> str:
        """The refusal: which option (``subject``), which directory, why, and what to do.

        Examples
        --------
        >>> Exposure("/p", "is writable by every user (mode 0777)").message("--work-dir /p/w")
        '--work-dir /p/w: /p is writable by every user (mode 0777): another user could replace \
what hpcgpu makes below it and run code as you; use a directory only you can write (mkdir -m \
700 ~/hpcgpu-work)'
        """
        return (f"{subject}: {self.path} {self.reason}: another user could replace what "
                f"hpcgpu makes below it and run code as you; {fix}")


def _trusted(uid: int, me: int) -> bool:
    return uid in (me, 0)


def _private_group(gid: int, me: int) -> bool:
    """Whether group ``gid`` has no member but user ``me`` (listed or by primary group)."""
    try:
        name = pwd.getpwuid(me).pw_name
        members = set(grp.getgrgid(gid).gr_mem)
        members |= {p.pw_name for p in pwd.getpwall() if p.pw_gid == gid}
    except KeyError:
        return False
    return members <= {name}


def _writers(path: str, info: os.stat_result, me: int) -> tuple[str, bool] | None:
    """Why users other than ``me`` and root can write this directory, and whether only its
    group(s) can; None if they cannot. An access control list counts: its named users and
    groups, and its owning group's own entry (the mode's group bits are then its mask)."""
    mode = stat.S_IMODE(info.st_mode)
    if not _trusted(info.st_uid, me):
        return f"belongs to uid {info.st_uid}, who can change it", False
    if mode & stat.S_IWOTH:
        return f"is writable by every user (mode {mode:04o})", False
    acl = acl_writers(path) if stat.S_ISDIR(info.st_mode) else None
    users = [uid for uid in (acl.users if acl else ()) if not _trusted(uid, me)]
    if users:
        return (f"is writable by uid {users[0]} through its access control list "
                f"(getfacl {path})"), False
    if (acl.owning_group if acl else mode & stat.S_IWGRP) and not _private_group(info.st_gid, me):
        return f"is writable by the members of group {info.st_gid} (mode {mode:04o})", True
    groups = [gid for gid in (acl.groups if acl else ()) if not _private_group(gid, me)]
    if groups:
        return (f"is writable by the members of group {groups[0]} through its access control "
                f"list (getfacl {path})"), True
    return None


def _component_exposure(directory: str, info: os.stat_result, child: os.stat_result | None,
                        me: int) -> Exposure | None:
    """The rule for one directory and the entry below it (None: the entry is made by the
    user, so it will be theirs)."""
    writers = _writers(directory, info, me)
    if writers is None:
        return None
    reason, group_only = writers
    sticky = info.st_mode & stat.S_ISVTX and _trusted(info.st_uid, me)
    if sticky and (child is None or _trusted(child.st_uid, me)):
        return None  # only an entry's owner (or the directory's) may rename it
    if sticky:
        reason = (f"has the sticky bit, but the entry below it belongs to uid {child.st_uid}, "
                  "who can rename it")
    elif stat.S_ISDIR(info.st_mode) and _trusted(info.st_uid, me):
        reason += " and has no sticky bit"
    return Exposure(directory, reason, group_only)


def exposure(path: str | os.PathLike, uid: int | None = None) -> Exposure | None:
    """The first directory of ``path`` (resolved, from ``/`` down) that lets a user other than
    ``uid`` (default: this process's) and root change what is below it; None if none does.

    ``path`` itself counts as a directory in which the user will make entries of their own
    (or, if it is a file, as the file to be read). A missing tail is checked as far as it
    exists; a component that cannot be examined raises ``ValueError``.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); exposure(d) is None
    True
    >>> os.chmod(d, 0o777); exposure(d).reason
    'is writable by every user (mode 0777) and has no sticky bit'
    >>> os.chmod(d, 0o1777); exposure(d) is None
    True
    """
    me = os.geteuid() if uid is None else uid
    real = Path(os.path.realpath(path))
    chain = [real, *real.parents][::-1]
    infos = []
    for part in chain:
        try:
            infos.append(os.lstat(part))
        except FileNotFoundError:
            break
        except OSError as error:  # cannot tell who may change it: as good as refused
            raise ValueError(f"{path}: cannot examine {part} ({error.strerror}): "
                             f"{PRIVATE_FIX}") from None
    for index, info in enumerate(infos):
        child = infos[index + 1] if index + 1 < len(infos) else None
        found = _component_exposure(str(chain[index]), info, child, me)
        if found is not None:
            return found
    return None


def check_private_path(path: str | os.PathLike, field: str, fix: str = PRIVATE_FIX) -> Path:
    """``path`` resolved, if :func:`exposure` finds nothing; else ``ValueError`` naming
    ``field``, the directory, why, and ``fix``.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); os.chmod(d, 0o777)
    >>> check_private_path(d + "/work", "--work-dir")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --work-dir /.../work: /... is writable by every user (mode 0777) and has no \
sticky bit: another user could replace what hpcgpu makes below it and run code as you; use \
a directory only you can write (mkdir -m 700 ~/hpcgpu-work)
    """
    found = exposure(path)
    if found is not None:
        raise ValueError(found.message(f"{field} {path}", fix))
    return Path(os.path.realpath(path))


class HeldDirectory:
    """A checked directory, held open: entries are made relative to the descriptor, so a
    rename of the path after the check cannot send them elsewhere.

    Parameters
    ----------
    path : str or PathLike
        The directory; checked with :func:`check_private_path` (its real path is kept).
    field : str
        The option that named it, for messages.
    fix : str
        What to do instead, for messages.

    Examples
    --------
    >>> import tempfile
    >>> with HeldDirectory(tempfile.mkdtemp(), "work") as held:
    ...     job = held.make_private("job")
    ...     oct(stat.S_IMODE(os.stat(job.write_private("k", "s")).st_mode))
    '0o600'
    """

    def __init__(self, path: str | os.PathLike, field: str, fix: str = PRIVATE_FIX, *,
                 _fd: int | None = None) -> None:
        if _fd is None:
            real = check_private_path(path, field, fix)
            fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            if not os.path.samestat(os.fstat(fd), os.lstat(real)):
                os.close(fd)
                raise ValueError(f"{field} {path}: {real} changed while it was checked")
            path, _fd = real, fd
        self.path, self.fd, self.field = Path(path), _fd, field

    def make_private(self, name: str) -> HeldDirectory:
        """Make ``name`` (new, mode 0700) in this directory and hold it: refused if what was
        made is not this user's directory with mode 0700."""
        os.mkdir(name, 0o700, dir_fd=self.fd)  # fails if it exists: never another's
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=self.fd)
        os.chmod(fd, 0o700)  # the umask may have removed bits: exact
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
            os.close(fd)
            raise RuntimeError(f"{self.path / name} is not this user's directory with mode 0700 "
                               f"after it was made; {PRIVATE_FIX}")
        return HeldDirectory(self.path / name, self.field, _fd=fd)

    def write_private(self, name: str, text: str) -> Path:
        """Write a new file ``name`` (mode 0600, never through a link); return its path."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self.fd)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return self.path / name

    def close(self) -> None:
        """Let go of the descriptor (the directory stays)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> HeldDirectory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
