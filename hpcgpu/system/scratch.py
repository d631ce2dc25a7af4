"""Where hpcgpu's workers keep their local directory (spilled data, shuffles): never in a
directory of another user.

distributed puts each worker's directory in ``<tmp>/dask-scratch-space`` (``<tmp>``: dask's
``temporary-directory``, else ``$TMPDIR`` or ``/tmp``) and takes that directory as it finds
it, whoever made it, as long as it can write there. Another user who made it first (mode
0777, or ``dask-scratch-space-<uid>``, which distributed tries next) owns the parent of every
worker directory: they can rename a worker's directory away and put their own in its place,
and the worker then writes spilled data there and reads back the pickles it finds: code run
as the user (#38's class: a shared directory). So when the user has named no local directory
and no ``temporary-directory``, hpcgpu gives its workers ``<tmp>/.hpcgpu-<uid>`` (the user's,
mode 0700, its parent under :mod:`hpcgpu.system.safedir`'s rule), or where another user holds
that name, a new private directory.
"""

from __future__ import annotations

import tempfile
import warnings

__all__ = ["scratch_directory"]


def scratch_directory() -> str:
    """The base of the workers' ``dask-scratch-space``: dask's ``temporary-directory`` where
    set (the user's choice), else ``<tmp>/.hpcgpu-<uid>``, made with mode 0700, else (another
    user's name there, or a ``<tmp>`` others can change) a new directory of
    ``tempfile.mkdtemp``.

    Examples
    --------
    >>> import os, stat
    >>> base = scratch_directory()
    >>> os.stat(base).st_uid == os.getuid(), oct(stat.S_IMODE(os.stat(base).st_mode))
    (True, '0o700')
    """
    import dask

    chosen = dask.config.get("temporary-directory", None)
    if chosen:
        return str(chosen)
    from hpcgpu.system.userdir import user_directory

    tmp = tempfile.gettempdir()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a group's TMPDIR: the fallback below is as good
            return str(user_directory(tmp, "TMPDIR"))
    except ValueError:  # not ours to use: a name no one can have made before us
        return tempfile.mkdtemp(prefix="hpcgpu-scratch-")
