"""Launchers: how one job starts its GPU workers across its nodes, one small class each
(``srun``, ``mpirun``, ``mpiexec``, ``jsrun``, ``flux``, ``direct``), independent of the scheduler.

A site adds one out of tree with an entry point in the group ``hpcgpu.launchers`` (the
object a :class:`Launcher` instance whose ``name`` is the entry point's).

Examples
--------
>>> from hpcgpu.jobspec.resources import GPUJobShape
>>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8)
>>> " ".join(get_launcher("srun").prefix(shape))
'srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1'
>>> " ".join(get_launcher("mpirun").prefix(shape))
'mpirun -n 2 --map-by ppr:1:node --bind-to none'
>>> " ".join(get_launcher("mpiexec").prefix(shape))
'mpiexec -n 2 --ppn 1'
>>> " ".join(get_launcher("jsrun").prefix(shape))
'jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 4 --cpu_per_rs 32 --bind packed:32'
>>> " ".join(get_launcher("flux").prefix(shape))
'flux run --nodes=2 --ntasks=2 --cores-per-task=32 --gpus-per-task=4 --env=HPCGPU_LOCAL_SIZE=1'

One task per GPU:

>>> " ".join(get_launcher("srun", one_task_per="gpu").prefix(shape))
'srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=8 --gpus-per-task=1 --kill-on-bad-exit=1'
>>> " ".join(get_launcher("mpirun", one_task_per="gpu").prefix(shape))
'mpirun -n 8 --map-by ppr:4:node --bind-to none'
>>> " ".join(get_launcher("mpiexec", one_task_per="gpu").prefix(shape))
'mpiexec -n 8 --ppn 4'
>>> " ".join(get_launcher("jsrun", one_task_per="gpu").prefix(shape))
'jsrun --nrs 8 --rs_per_host 4 --tasks_per_rs 1 --gpu_per_rs 1 --cpu_per_rs 8 --bind packed:8'
>>> " ".join(get_launcher("flux", one_task_per="gpu").prefix(shape))
'flux run --nodes=2 --ntasks=8 --cores-per-task=8 --gpus-per-task=1 --env=HPCGPU_LOCAL_SIZE=4'
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from functools import lru_cache

from hpcgpu.launchers.base import Launcher
from hpcgpu.launchers.direct import Direct
from hpcgpu.launchers.flux import FluxRun
from hpcgpu.launchers.jsrun import Jsrun
from hpcgpu.launchers.mpiexec import Mpiexec
from hpcgpu.launchers.mpirun import Mpirun
from hpcgpu.launchers.srun import Srun

__all__ = ["ENTRY_POINT_GROUP", "LAUNCHERS", "LOCAL_RANK_VARIABLES", "LOCAL_SIZE_VARIABLES",
           "Launcher", "NODE_VARIABLES", "RANK_VARIABLES", "get_launcher", "launcher_names"]

#: Entry point group through which a site adds launchers.
ENTRY_POINT_GROUP = "hpcgpu.launchers"
#: The built-in launchers, by name.
LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher for launcher in (Srun(), Mpirun(), Mpiexec(), Jsrun(), Direct(), FluxRun())
}
#: Node-local rank variables, in the order the worker looks for them.
LOCAL_RANK_VARIABLES = tuple(v for launcher in LAUNCHERS.values() for v in launcher.local_rank_variables)
#: Global rank variables, in the order the worker looks for them.
RANK_VARIABLES = tuple(v for launcher in LAUNCHERS.values() for v in launcher.rank_variables)
#: Tasks-on-this-node variables, in the order the worker looks for them.
LOCAL_SIZE_VARIABLES = tuple(v for launcher in LAUNCHERS.values() for v in launcher.local_size_variables)
#: Node-index variables, in the order the worker looks for them.
NODE_VARIABLES = tuple(v for launcher in LAUNCHERS.values() for v in launcher.node_variables)


@lru_cache(maxsize=1)
def _site_launchers() -> dict[str, Launcher]:
    """The site's launchers (entry points) under names not built in."""
    found = {}
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in LAUNCHERS:
            launcher = point.load()
            if not isinstance(launcher, Launcher) or launcher.name != point.name:
                raise ValueError(f"launcher {point.name!r} ({point.value}) is not a Launcher "
                                 f"named {point.name!r}")
            found[point.name] = launcher
    return found


def launcher_names() -> tuple[str, ...]:
    """Every launcher's name, built-in ones first."""
    return (*LAUNCHERS, *_site_launchers())


def get_launcher(name: str, gpu_binding: str = "gpus-per-task",
                 one_task_per: str | None = None) -> Launcher:
    """Return the launcher called ``name``.

    ``one_task_per`` is ``node`` (the default) or ``gpu``; a ``gpu_binding`` other than the
    default implies ``gpu``.

    Examples
    --------
    >>> get_launcher("aprun")
    Traceback (most recent call last):
    ...
    ValueError: launcher='aprun' is not supported: use one of srun, mpirun, mpiexec, jsrun, direct, flux
    >>> get_launcher("srun", gpu_binding="gpu-bind").one_task_per
    'gpu'
    >>> get_launcher("direct", one_task_per="gpu")
    Traceback (most recent call last):
    ...
    ValueError: one_task_per='gpu' needs a launcher that starts tasks (srun, mpirun, mpiexec, jsrun, flux), not 'direct'
    """
    known = {**LAUNCHERS, **(_site_launchers() if name not in LAUNCHERS else {})}
    if name not in known:
        raise ValueError(f"launcher={name!r} is not supported: use one of {', '.join(known)}")
    if gpu_binding not in ("gpus-per-task", "gpu-bind", "none"):
        raise ValueError(f"gpu_binding={gpu_binding!r}: use 'gpus-per-task', 'gpu-bind' or 'none'")
    if one_task_per not in (None, "node", "gpu"):
        raise ValueError(f"one_task_per={one_task_per!r}: use 'node' (one task starts a worker "
                         "per GPU of its node) or 'gpu' (one task per GPU)")
    if gpu_binding != "gpus-per-task":
        if name != "srun":
            raise ValueError(f"gpu_binding applies to launcher='srun' only, not {name!r}")
        if one_task_per == "node":
            raise ValueError(f"gpu_binding={gpu_binding!r} binds a GPU to each task: use "
                             "one_task_per='gpu'")
        one_task_per = "gpu"
    if one_task_per == "gpu" and not known[name].starts_tasks:
        starting = ", ".join(n for n, launcher in known.items() if launcher.starts_tasks)
        raise ValueError(f"one_task_per='gpu' needs a launcher that starts tasks ({starting}), "
                         f"not {name!r}")
    return dataclasses.replace(known[name], gpu_binding=gpu_binding,
                               one_task_per=one_task_per or "node")
