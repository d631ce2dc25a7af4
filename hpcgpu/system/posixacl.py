"""Who may write a directory through its POSIX access control list.

A directory's mode bits do not tell everything: ``setfacl -m u:alice:rwx dir`` lets alice
write it while ``ls -l`` shows ``drwxrwx---+`` (the group bits become the ACL's mask) and
the owning group may well be the user's own. The path rule of :mod:`hpcgpu.system.safedir`
asks :func:`acl_writers` about every directory, so that such a directory counts as writable
by alice. The ACL is the ``system.posix_acl_access`` extended attribute, in the kernel's
format (``include/uapi/linux/posix_acl_xattr.h``): a version word (2), then entries of tag
(u16), permissions (u16) and id (u32), little-endian.

NFSv4 ACLs (``system.nfs4_acl``) are not read: their grants are not seen here.
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass

__all__ = ["AclWriters", "parse_acl", "acl_writers", "ACL_ATTRIBUTE"]

ACL_ATTRIBUTE = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_WRITE = 0o2
_ENTRY = struct.Struct("<HHI")


@dataclass(frozen=True)
class AclWriters:
    """What an access control list lets write, after its mask.

    Attributes
    ----------
    users : tuple of int
        Named users (``u:<uid>:w``) who may write.
    groups : tuple of int
        Named groups (``g:<gid>:w``) whose members may write.
    owning_group : bool
        Whether the owning group may write (its entry and the mask both allow it).
    """

    users: tuple[int, ...] = ()
    groups: tuple[int, ...] = ()
    owning_group: bool = False


def parse_acl(blob: bytes) -> AclWriters:
    """The writers of an ACL in the kernel's xattr format; ``ValueError`` if malformed.

    Examples
    --------
    >>> entry = lambda tag, perm, ident=0xFFFFFFFF: _ENTRY.pack(tag, perm, ident)
    >>> acl = (struct.pack("<I", 2) + entry(_USER_OBJ, 7) + entry(_USER, 7, 1000)
    ...        + entry(_GROUP_OBJ, 5) + entry(_GROUP, 6, 50) + entry(_MASK, 7) + entry(_OTHER, 5))
    >>> parse_acl(acl)
    AclWriters(users=(1000,), groups=(50,), owning_group=False)
    >>> masked = acl.replace(entry(_MASK, 7), entry(_MASK, 5))  # chmod g-w: the mask wins
    >>> parse_acl(masked)
    AclWriters(users=(), groups=(), owning_group=False)
    """
    if len(blob) < 4 or (len(blob) - 4) % _ENTRY.size or struct.unpack_from("<I", blob)[0] != _VERSION:
        raise ValueError(f"not a POSIX ACL of version {_VERSION} ({len(blob)} bytes)")
    entries = [_ENTRY.unpack_from(blob, offset) for offset in range(4, len(blob), _ENTRY.size)]
    masks = [perm for tag, perm, _ in entries if tag == _MASK]
    mask = masks[0] if masks else 0o7  # a minimal ACL (no named entry) has no mask

    def writes(perm: int) -> bool:
        return bool(perm & mask & _WRITE)

    return AclWriters(
        users=tuple(ident for tag, perm, ident in entries if tag == _USER and writes(perm)),
        groups=tuple(ident for tag, perm, ident in entries if tag == _GROUP and writes(perm)),
        owning_group=any(tag == _GROUP_OBJ and writes(perm) for tag, perm, _ in entries))


def acl_writers(path: str | os.PathLike) -> AclWriters | None:
    """The writers that ``path``'s access control list adds (never following a link); None
    where it has none, or its filesystem keeps none; ``ValueError`` where it cannot be read.

    >>> import tempfile
    >>> acl_writers(tempfile.mkdtemp()) is None
    True
    """
    try:
        blob = os.getxattr(path, ACL_ATTRIBUTE, follow_symlinks=False)
    except OSError as error:
        if error.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise ValueError(f"cannot read the access control list of {path} "
                         f"({error.strerror})") from None
    return parse_acl(blob)
