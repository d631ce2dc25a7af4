"""Reading a file that says where to connect (a scheduler file), written by another process.

Whoever can write such a file, or replace a directory above it, decides which scheduler a
worker or client joins: a scheduler that then runs code as the user. So a reader takes it
only where :func:`hpcgpu.system.safedir.exposure` finds nothing for the file itself (no other
user can write it or replace a directory of its path; in a sticky directory, the file must
be the user's or root's), read through a descriptor opened without following a link. Files
hpcgpu writes for itself (``private``) must also have mode 0600; ``not_before`` refuses one
left by an earlier run (its inode change time, which its owner cannot set back).
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from hpcgpu.system.safedir import PRIVATE_FIX, exposure

__all__ = ["read_trusted_json", "wait_for_trusted_json", "address_from_file"]


def read_trusted_json(path: str | os.PathLike, field: str, *, private: bool = False,
                      not_before: float | None = None) -> dict | None:
    """The file's JSON content; None while it is missing, half written or older than
    ``not_before``; ``ValueError`` naming ``field`` where another user could have written it.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp(); f = os.path.join(d, "s.json")
    >>> read_trusted_json(f, "scheduler_file") is None
    True
    >>> fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o600); _ = os.write(fd, b'{"address": "tls://a:1"}')
    >>> read_trusted_json(f, "scheduler_file", private=True)
    {'address': 'tls://a:1'}
    >>> os.chmod(f, 0o644); read_trusted_json(f, "scheduler_file", private=True)
    Traceback (most recent call last):
    ...
    ValueError: scheduler_file ...s.json has mode 0644, not 0600: hpcgpu writes it for you alone; remove it
    """
    real = Path(os.path.realpath(path))
    found = exposure(real)
    if found is not None:
        raise ValueError(found.message(f"{field} {path}", f"write it where only you can ({PRIVATE_FIX})"))
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{field} {path} is not a regular file: remove it")
        if info.st_uid not in (os.geteuid(), 0):  # the checked path: only a swap before
            raise ValueError(f"{field} {path} changed while it was checked: another user can "
                             f"write there; {PRIVATE_FIX}")
        if private and stat.S_IMODE(info.st_mode) != 0o600:
            raise ValueError(f"{field} {path} has mode {stat.S_IMODE(info.st_mode):04o}, not "
                             "0600: hpcgpu writes it for you alone; remove it")
        if not_before is not None and info.st_ctime < not_before:
            return None  # an earlier run's: the new one has not been written yet
        try:
            return json.loads(handle.read())
        except ValueError:
            return None  # half written


def wait_for_trusted_json(path: str | os.PathLike, field: str, timeout: float | None = None,
                          **checks) -> dict:
    """:func:`read_trusted_json` until it holds something (``TimeoutError`` after
    ``timeout`` s; None waits as long as it takes, as distributed does for its scheduler file)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        content = read_trusted_json(path, field, **checks)
        if content is not None:
            return content
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{field} {path} did not appear within {timeout:g} s")
        time.sleep(0.2)


def address_from_file(path: str | os.PathLike, field: str = "--scheduler-file",
                      timeout: float | str | None = None) -> str:
    """The ``address`` of the scheduler file at ``path``, once it is there and no other user
    could have written it (``ValueError`` naming ``field`` otherwise, ``TimeoutError`` after
    ``timeout``: seconds or a Dask duration such as ``"60s"``).

    Examples
    --------
    >>> import tempfile
    >>> f = os.path.join(tempfile.mkdtemp(), "s.json")
    >>> _ = Path(f).write_text('{"address": "tls://10.0.0.1:8786"}')
    >>> address_from_file(f)
    'tls://10.0.0.1:8786'
    """
    from dask.utils import parse_timedelta

    seconds = None if timeout in (None, "") else parse_timedelta(timeout, default="seconds")
    content = wait_for_trusted_json(path, field, timeout=seconds)
    if not content.get("address"):
        raise ValueError(f"{field} {path} holds no scheduler address")
    return content["address"]
