"""Python modules started without the working directory on their import path.

``python -m module`` puts the working directory first on ``sys.path`` (as ``-c`` does), so
a ``dask.py`` or ``hpcgpu/`` in it is imported instead of the installed one. A batch job
runs in the directory it was submitted from, often a shared project or scratch directory:
every process that hpcgpu started there with ``-m`` (``hpcgpu run``'s scheduler and
workers, a worker's per-GPU children, the reaper) ran a module another user had put there,
as the user (#38's class: a shared directory). :func:`module_argv` starts the same module
the same way (``runpy``'s ``-m`` path: ``__main__``, ``sys.argv``, multiprocessing's
re-imports) with that first entry removed first. Python 3.11's ``-P`` does this, but not on
3.10, and the python of a job may be either. The user's own script is left as it is.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["DROP_CWD", "SAFE_MAIN", "CHILDREN_DROP_CWD", "SAFE_MAIN_AND_CHILDREN", "module_argv",
           "code_argv", "children_drop_cwd"]

#: ``-c``'s first statement: drop the working directory that ``-c`` put first (unless
#: ``-P`` or ``PYTHONSAFEPATH`` kept it off).
DROP_CWD = 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0)'

#: ``-c``'s code: :data:`DROP_CWD`, then run the module named next as ``-m`` does.
SAFE_MAIN = DROP_CWD + ';import runpy;runpy._run_module_as_main(sys.argv.pop(1))'

#: :func:`children_drop_cwd` as ``-c`` code of the standard library alone (:func:`code_argv`'s
#: rewrite inline), for a process whose python may not have hpcgpu: dask-jobqueue's
#: ``dask worker``, whose nanny spawns its worker processes as ``python -c``
CHILDREN_DROP_CWD = (
    f"import multiprocessing.util as _u;_D={DROP_CWD!r};"
    "_u.spawnv_passfds=lambda p,a,s,f=_u.spawnv_passfds,D=_D:f(p,"
    '(lambda i:[*a[:i],a[i] if a[i].startswith(D) else D+";"+a[i],*a[i+1:]])(a.index("-c",1)+1)'
    ' if "-c" in a[1:-1] else a,s);del _u,_D')

#: :data:`SAFE_MAIN` whose module's new interpreters drop the working directory too
SAFE_MAIN_AND_CHILDREN = SAFE_MAIN.replace(";import runpy", f";{CHILDREN_DROP_CWD};import runpy", 1)


def module_argv(argv: Sequence[str]) -> list[str]:
    """``[python, "-m", module, *args]`` as ``[python, "-c", SAFE_MAIN, module, *args]``.

    Examples
    --------
    >>> module_argv(["py", "-m", "hpcgpu.worker", "tls://h:1"]) == [
    ...     "py", "-c", SAFE_MAIN, "hpcgpu.worker", "tls://h:1"]
    True
    """
    python, flag, *rest = argv
    if flag != "-m":
        raise ValueError(f"not a python -m command: {list(argv)}")
    return [python, "-c", SAFE_MAIN, *rest]


def code_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with :data:`DROP_CWD` put before the code of its ``-c``, if it has one.

    Examples
    --------
    >>> code_argv(["py", "-B", "-c", "import m", "--fork"]) == ["py", "-B", "-c", DROP_CWD + ";import m", "--fork"]
    True
    >>> code_argv(code_argv(["py", "-c", "pass"])) == code_argv(["py", "-c", "pass"])
    True
    """
    out = list(argv)
    if "-c" in out[1:-1]:
        at = out.index("-c", 1) + 1
        if not out[at].startswith(DROP_CWD):
            out[at] = f"{DROP_CWD};{out[at]}"
    return out


def children_drop_cwd() -> None:
    """The interpreters that ``multiprocessing`` starts from this process (``spawn``, the
    ``forkserver``, the resource tracker: ``python -c CODE``) drop the working directory
    too: ``-c`` puts it first, and their first import, ``multiprocessing``, came from a
    shared job directory (a nanny's worker process under UCX). They all start through
    ``multiprocessing.util.spawnv_passfds``, wrapped here. Idempotent."""
    from multiprocessing import util

    spawnv = util.spawnv_passfds
    if getattr(spawnv, "drops_cwd", False):
        return

    def spawnv_passfds(path, args, passfds):
        return spawnv(path, code_argv(args), passfds)

    spawnv_passfds.drops_cwd = True
    util.spawnv_passfds = spawnv_passfds
