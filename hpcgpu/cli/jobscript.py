"""``hpcgpu jobscript``: print (and optionally check) a GPU job script."""

from __future__ import annotations

import os
import sys
import tempfile

import click

from hpcgpu import commands
from hpcgpu.queues import check_queue
from hpcgpu.dialects import DIALECTS, get_dialect
from hpcgpu.launchers import LAUNCHERS, get_launcher
from hpcgpu.render import render, worker_job_script
from hpcgpu.resources import GPUJobShape
from hpcgpu.worker_command import WorkerCommand

__all__ = ["jobscript", "parse_site_options", "check_script"]


def parse_site_options(pairs: tuple[str, ...]) -> dict[str, object]:
    """Turn ``("gpu_directive=gres", "cpus=64")`` into keyword arguments.

    Examples
    --------
    >>> parse_site_options(("gpu_directive=gres", "multi_node_parallel_environment=mpi4"))
    {'gpu_directive': 'gres', 'multi_node_parallel_environment': 'mpi4'}
    >>> parse_site_options(("gres",))
    Traceback (most recent call last):
    ...
    ValueError: --site 'gres' is not KEY=VALUE (e.g. --site gpu_directive=gres)
    """
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--site {pair!r} is not KEY=VALUE (e.g. --site gpu_directive=gres)")
        options[key.strip().replace("-", "_")] = value.strip()
    return options


def check_script(scheduler: str, text: str) -> tuple[bool | None, str]:
    """Ask the real scheduler's parser about ``text``.

    Returns (accepted, the scheduler's verdict); accepted is ``None`` when the dialect
    has no dry-run command (PBS, LSF): the script was then only rendered.
    """
    dialect = get_dialect(scheduler)
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as handle:
        handle.write(text)
    try:
        argv = dialect.check_argv(handle.name)
        if argv is None:
            return None, f"{scheduler} has no dry-run command: rendered, not checked"
        result = commands.run(argv, check=False, timeout=60)
        verdict = (result.stdout + result.stderr).strip()
        return result.returncode == 0, verdict
    finally:
        os.unlink(handle.name)


@click.command()
@click.argument("scheduler", type=click.Choice(sorted(DIALECTS)))
@click.option("--nodes", default=1, type=int, show_default=True, help="Nodes per job.")
@click.option("--gpus-per-node", default=1, type=int, show_default=True, help="GPUs (= workers) per node.")
@click.option("--cpus-per-gpu", default=1, type=int, show_default=True, help="CPU cores per GPU.")
@click.option("--memory-per-gpu", default=None, help="Host memory per GPU, e.g. 60GB.")
@click.option("--memory-per-node", default=None, help="Host memory per node (instead).")
@click.option("--walltime", default="01:00:00", show_default=True, help="HH:MM:SS, D-HH:MM:SS or minutes.")
@click.option("--queue", "-q", default=None, help="Partition / queue.")
@click.option("--account", "-A", default=None, help="Account / project.")
@click.option("--job-name", default="hpcgpu", show_default=True)
@click.option("--gpu-type", default=None, help="GPU model where the site types GPUs, e.g. h100.")
@click.option("--exclusive", is_flag=True, help="Ask for whole nodes.")
@click.option("--launcher", default=None, type=click.Choice(sorted(LAUNCHERS)),
              help="How workers start (default: the scheduler's usual one).")
@click.option("--one-task-per", default=None, type=click.Choice(["node", "gpu"]),
              help="One launcher task per node starting a worker per GPU (default), or one "
                   "task per GPU.")
@click.option("--gpu-binding", default="gpus-per-task", show_default=True,
              type=click.Choice(["gpus-per-task", "gpu-bind", "none"]),
              help="srun GPU binding with one task per GPU (a value other than the default "
                   "implies --one-task-per gpu).")
@click.option("--site", multiple=True, metavar="KEY=VALUE",
              help="Site option of the dialect, e.g. gpu_directive=gres (repeatable).")
@click.option("--scheduler-address", default=None, help="Scheduler address for the workers.")
@click.option("--scheduler-file", default="hpcgpu-scheduler.json", show_default=True,
              help="Scheduler file on a shared filesystem (used without --scheduler-address).")
@click.option("--python", "python", default="python3", show_default=True)
@click.option("--log-directory", default=".", show_default=True)
@click.option("--job-extra-directive", "extra", multiple=True, help="Extra directive (repeatable).")
@click.option("--prologue", multiple=True, help="Shell line before the workers (repeatable).")
@click.option("--check", is_flag=True, help="Ask the installed scheduler whether it accepts the script.")
def jobscript(scheduler: str, **kw) -> None:
    """Print a job script that starts one Dask worker per GPU.

    \b
    Example:
      hpcgpu jobscript slurm --nodes 2 --gpus-per-node 4 --cpus-per-gpu 8 \\
          --memory-per-gpu 60GB --walltime 01:00:00 --check
    """
    try:
        text = _render(scheduler, kw)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(text, nl=False)
    if kw["check"]:
        try:  # the queue's nodes first: the schedulers' own refusals do not say which field
            dialect = get_dialect(scheduler, **parse_site_options(kw["site"]))
            check_queue(scheduler, _shape(kw), dialect)
        except ValueError as exc:
            click.echo(f"REFUSED: {exc}", err=True)
            sys.exit(1)
        ok, verdict = check_script(scheduler, text)
        if ok is None:
            click.echo(f"not checked: {verdict}", err=True)
            return
        click.echo(f"{'accepted' if ok else 'REFUSED'} by {scheduler}: {verdict}", err=True)
        sys.exit(0 if ok else 1)


def _shape(kw: dict) -> GPUJobShape:
    return GPUJobShape.create(
        nodes=kw["nodes"], gpus_per_node=kw["gpus_per_node"], cpus_per_gpu=kw["cpus_per_gpu"],
        memory_per_gpu=kw["memory_per_gpu"], memory_per_node=kw["memory_per_node"],
        walltime=kw["walltime"], queue=kw["queue"], account=kw["account"],
        job_name=kw["job_name"], gpu_type=kw["gpu_type"], exclusive=kw["exclusive"],
    )


def _render(scheduler: str, kw: dict) -> str:
    dialect = get_dialect(scheduler, **parse_site_options(kw["site"]))
    shape = _shape(kw)
    launcher = get_launcher(kw["launcher"] or dialect.default_launcher, kw["gpu_binding"],
                            kw["one_task_per"])
    address = kw["scheduler_address"]
    worker = WorkerCommand(
        scheduler=address, scheduler_file=None if address else kw["scheduler_file"],
        nthreads=shape.cpus_per_gpu,
    )
    script = worker_job_script(
        shape, dialect, launcher, worker, python=kw["python"], log_directory=kw["log_directory"],
        job_extra_directives=kw["extra"], job_script_prologue=kw["prologue"],
    )
    return render(script)
