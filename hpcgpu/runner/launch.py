"""The command that starts one worker per GPU of the allocation through its launcher."""

from __future__ import annotations

import shlex

from hpcgpu.launchers import Launcher
from hpcgpu.runner.allocation import Allocation
from hpcgpu.worker_command import WorkerCommand

__all__ = ["workers_argv", "split_args"]


def workers_argv(allocation: Allocation, launcher: Launcher, worker: WorkerCommand,
                 python: str, launcher_args: tuple[str, ...] = ()) -> list[str]:
    """Launcher prefix, extra launcher arguments, worker command.

    With one task per node (the default) each task starts a worker per GPU of its node.

    Examples
    --------
    >>> a = Allocation("slurm", "7", nodes=2, gpus_per_node=2, cpus_per_node=8)
    >>> from hpcgpu.launchers import get_launcher
    >>> w = WorkerCommand(scheduler="tls://n1:4000")
    >>> shlex.join(workers_argv(a, get_launcher("srun"), w, "py"))  # doctest: +NORMALIZE_WHITESPACE
    'srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=8 --kill-on-bad-exit=1
     py -m hpcgpu.worker tls://n1:4000 --nthreads 1 --memory-limit auto --death-timeout 120
     --launcher srun --gpus-per-node 2'
    >>> a1 = Allocation(None, None, nodes=1, gpus_per_node=4, cpus_per_node=8)
    >>> shlex.join(workers_argv(a1, get_launcher("direct"), w, "py"))  # doctest: +NORMALIZE_WHITESPACE
    'py -m hpcgpu.worker tls://n1:4000 --nthreads 1 --memory-limit auto --death-timeout 120
     --launcher direct --gpus-per-node 4'
    """
    shape = allocation.shape()
    launcher.validate(shape)
    return [*launcher.prefix(shape), *launcher_args, *launcher.worker(worker, shape).argv(python)]


def split_args(text: str | None) -> tuple[str, ...]:
    """Split a shell-quoted option value such as ``--launcher-args "--oversubscribe"``.

    Examples
    --------
    >>> split_args("--oversubscribe -x FOO")
    ('--oversubscribe', '-x', 'FOO')
    """
    return tuple(shlex.split(text or ""))
