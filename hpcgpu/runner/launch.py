"""The command that starts one worker per GPU of the allocation through its launcher.

The layout follows the allocation. Where the batch system binds GPUs to tasks (SLURM
``--gpus-per-task``), srun starts one task per task of the job, each with its own GPU(s);
otherwise one task per node starts a worker per GPU of its node. srun asks only for the
cores the allocation has, and for no GPU count where nodes differ (``-N2 --gpus=3``): each
node's task then gets that node's GPUs.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from typing import Mapping

from hpcgpu.launchers import LAUNCHERS, RANK_VARIABLES, Launcher
from hpcgpu.launchers.base import ALL_VISIBLE
from hpcgpu.runner.allocation import Allocation
from hpcgpu.jobspec.container import Container, worker_binds
from hpcgpu.jobspec.dialects import DIALECTS
from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = ["workers_argv", "split_args", "launcher_environment", "ALL_VISIBLE", "started_per_task"]



def workers_argv(allocation: Allocation, launcher: Launcher, worker: WorkerCommand,
                 python: str, launcher_args: tuple[str, ...] = (),
                 container: Container | None = None) -> list[str]:
    """Launcher prefix, extra launcher arguments, the ``container``'s prefix (with the paths
    the worker command names bound), worker command.

    Examples
    --------
    >>> from hpcgpu.launchers import get_launcher
    >>> from hpcgpu.system.pymain import SAFE_MAIN  # python -m, without the cwd on sys.path
    >>> show = lambda argv: shlex.join(argv).replace(shlex.quote(SAFE_MAIN), "SAFE_MAIN")
    >>> w = WorkerCommand(scheduler="tls://n1:4000")
    >>> a = Allocation("slurm", "7", nodes=2, gpus_per_node=2, cpus_per_node=8)
    >>> show(workers_argv(a, get_launcher("srun"), w, "py"))  # doctest: +NORMALIZE_WHITESPACE
    'srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=8 --gpus-per-node=2
     --kill-on-bad-exit=1 py -c SAFE_MAIN hpcgpu.worker tls://n1:4000 --nthreads 1 --memory-limit auto
     --death-timeout 120 --launcher srun --gpus-per-node 2'

    One GPU bound to each of 4 tasks (``--ntasks=4 --gpus-per-task=1``), one core each:

    >>> t = Allocation("slurm", "7", nodes=1, gpus_per_node=4, cpus_per_node=4,
    ...                gpus_per_task=1, tasks=4)
    >>> show(workers_argv(t, get_launcher("srun"), w, "py"))  # doctest: +NORMALIZE_WHITESPACE
    'srun --nodes=1 --ntasks=4 --cpus-per-task=1 --gpus-per-task=1 --kill-on-bad-exit=1
     py -c SAFE_MAIN hpcgpu.worker tls://n1:4000 --nthreads 1 --memory-limit auto --death-timeout 120
     --launcher srun'
    >>> from hpcgpu.jobspec.container import Container
    >>> show(workers_argv(a, get_launcher("srun"), w, "python3", (), Container("i.sif")))[103:163]
    'apptainer exec --nv i.sif python3 -c SAFE_MAIN hpcgpu.worker'
    >>> a1 = Allocation(None, None, nodes=1, gpus_per_node=4, cpus_per_node=8)
    >>> show(workers_argv(a1, get_launcher("direct"), w, "py"))  # doctest: +NORMALIZE_WHITESPACE
    'py -c SAFE_MAIN hpcgpu.worker tls://n1:4000 --nthreads 1 --memory-limit auto --death-timeout 120
     --launcher direct --gpus-per-node 4'
    """
    shape = allocation.shape()
    launcher.validate(shape)
    step = launcher.allocation_step(allocation)
    if step is not None:
        prefix, gpus = step
    else:
        # mpirun & co. start one task per node; where nodes differ each takes what it sees
        prefix = launcher.prefix(shape)
        gpus = allocation.gpus_per_node if allocation.uniform else ALL_VISIBLE
    command = dataclasses.replace(worker, launcher=launcher.name, gpus_per_node=gpus)
    inside = container.prefix(worker_binds(command), cwd=os.getcwd()) if container else []
    across = _across_hosts(allocation, launcher, os.environ) if prefix else []
    return [*prefix, *across, *launcher_args, *inside, *command.argv(python)]


def _across_hosts(allocation: Allocation, launcher: Launcher, env: Mapping[str, str]) -> list[str]:
    """What ``launcher`` needs to reach every host of a job of several nodes whose scheduler
    it may not be able to ask (PBS: ``PBS_NODEFILE``, see :meth:`Launcher.across_hosts`).

    >>> from hpcgpu.launchers import get_launcher
    >>> a = Allocation("pbs", "7.pbs", nodes=2, gpus_per_node=2, cpus_per_node=8)
    >>> _across_hosts(a, get_launcher("mpirun"), {"PBS_NODEFILE": "/var/spool/pbs/aux/7.pbs"})
    ['--hostfile', '/var/spool/pbs/aux/7.pbs', '--mca', 'plm_rsh_agent', 'pbs_tmrsh : ssh : rsh']
    >>> _across_hosts(a, get_launcher("mpiexec"), {"PBS_NODEFILE": "/var/spool/pbs/aux/7.pbs"})
    []
    """
    if allocation.nodes < 2 or allocation.scheduler not in DIALECTS:
        return []
    dialect = DIALECTS[allocation.scheduler]
    path = env.get(dialect.host_file) if dialect.host_file else None
    return launcher.across_hosts(path, dialect.remote_shell) if path else []


def launcher_environment(allocation: Allocation, launcher: Launcher,
                         env: dict[str, str]) -> dict[str, str]:
    """``env`` as the launcher needs it where GPUs are bound to tasks: mpirun's daemons
    (one srun task per node under SLURM) would get one GPU each, so all ranks of a node
    would see the same one. Open MPI's ``plm_slurm_args`` gives them the node's GPUs.

    Examples
    --------
    >>> from hpcgpu.launchers import get_launcher
    >>> t = Allocation("slurm", "7", nodes=1, gpus_per_node=2, cpus_per_node=2,
    ...                gpus_per_task=1, tasks=2)
    >>> launcher_environment(t, get_launcher("mpirun"), {"SLURM_GPUS_PER_TASK": "1", "A": "b"})
    {'A': 'b', 'OMPI_MCA_plm_slurm_args': '--gpus-per-node=2'}
    """
    if launcher.allocation_step(allocation) is not None or not allocation.gpus_per_task:
        return env
    if not allocation.uniform:
        raise ValueError(
            f"launcher={launcher.name!r} with GPUs bound to tasks on nodes with different "
            f"GPU counts ({allocation.layout}): use --launcher srun, or ask for "
            "--gpus-per-node instead of --gpus-per-task")
    env = {k: v for k, v in env.items() if k != "SLURM_GPUS_PER_TASK"}
    return launcher.bound_task_environment(allocation, env)


def split_args(text: str | None) -> tuple[str, ...]:
    """Split a shell-quoted option value such as ``--launcher-args "--oversubscribe"``.

    Examples
    --------
    >>> split_args("--oversubscribe -x FOO")
    ('--oversubscribe', '-x', 'FOO')
    """
    return tuple(shlex.split(text or ""))


def started_per_task(env: Mapping[str, str] | None = None) -> str | None:
    """Why this process looks like one of several copies a launcher started, or None.

    ``hpcgpu run`` starts the launcher itself; run under ``srun`` (or ``mpirun``) every copy
    would start its own scheduler and workers.

    Examples
    --------
    >>> started_per_task({"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
    ...                   "SLURM_PROCID": "1"})  # doctest: +ELLIPSIS
    'hpcgpu run is task 1 of 2 started by srun: ...'
    >>> started_per_task({"SLURM_JOB_ID": "5", "SLURM_NTASKS": "8"}) is None  # the batch script
    True
    """
    env = os.environ if env is None else env
    for launcher in LAUNCHERS:
        size = LAUNCHERS[launcher].task_size(env)
        if size and size > 1:
            rank = next((env[v] for v in RANK_VARIABLES if env.get(v, "").isdigit()), "?")
            return (f"hpcgpu run is task {rank} of {size} started by {launcher}: each copy would "
                    "start its own scheduler and workers. Run it once, in the batch script "
                    f"itself (not under {launcher}): it starts the workers through the launcher")
    return None
