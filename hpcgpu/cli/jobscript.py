"""``hpcgpu jobscript``: print (and optionally check) a GPU job script."""

from __future__ import annotations

import os
import sys
import tempfile

import click

from hpcgpu.system import commands
from hpcgpu.cluster.batch.setup import ClusterSetup, naming_the_source, prepare
from hpcgpu.jobspec.dialects import DIALECTS, get_dialect
from hpcgpu.jobspec.gpuflags import given_flags, gpu_flags
from hpcgpu.launchers import LAUNCHERS, get_launcher
from hpcgpu.jobspec.queues import check_queue
from hpcgpu.jobspec.container import RUNTIMES, worker_binds
from hpcgpu.jobspec.render import render, worker_job_script
from hpcgpu.jobspec.worker_command import WorkerCommand

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
@click.option("--profile", default=None, help="A site profile of hpcgpu.profiles in the dask config.")
@click.option("--nodes", default=None, type=int, help="Nodes per job [default: 1].")
@click.option("--gpus-per-node", default=None, type=int, help="GPUs (= workers) per node [default: 1].")
@click.option("--cpus-per-gpu", default=None, type=int, help="CPU cores per GPU [default: 1].")
@click.option("--memory-per-gpu", default=None, help="Host memory per GPU, e.g. 60GB.")
@click.option("--memory-per-node", default=None, help="Host memory per node (instead).")
@click.option("--walltime", default=None, help="HH:MM:SS, D-HH:MM:SS or minutes [default: 01:00:00].")
@click.option("--queue", "-q", default=None, help="Partition / queue.")
@click.option("--account", "-A", default=None, help="Account / project.")
@click.option("--job-name", default=None, help="[default: hpcgpu]")
@click.option("--gpu-type", default=None, help="GPU model where the site types GPUs, e.g. h100.")
@click.option("--exclusive", is_flag=True, default=None, help="Ask for whole nodes.")
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
@click.option("--python", "python", default=None,
              help="Python on the nodes [default: the config's, else this Python].")
@click.option("--log-directory", default=None,
              help="Where the job's output goes [default: the config's, else ~/.cache/hpcgpu/logs].")
@click.option("--container", default=None, metavar="IMAGE",
              help="Run the workers in this image (apptainer exec --nv; docs/containers.md).")
@click.option("--container-runtime", default=None, type=click.Choice(sorted(RUNTIMES)),
              help="The runtime that starts --container [default: apptainer].")
@click.option("--job-extra-directive", "extra", multiple=True, help="Extra directive (repeatable).")
@click.option("--prologue", multiple=True, help="Shell line before the workers (repeatable).")
@click.option("--check", is_flag=True, help="Ask the installed scheduler whether it accepts the script.")
@gpu_flags(transports=False)  # the workers' (dask cuda worker's); the network is not rendered here
def jobscript(scheduler: str, **kw) -> None:
    """Print a job script that starts one Dask worker per GPU.

    Options not given come from the dask config exactly as for SLURMCluster and the
    others (hpcgpu.<scheduler>.*, your jobqueue.<scheduler>.*, DASK_HPCGPU__*, profiles).

    \b
    Example:
      hpcgpu jobscript slurm --nodes 2 --gpus-per-node 4 --cpus-per-gpu 8 \\
          --memory-per-gpu 60GB --walltime 01:00:00 --check
    """
    try:
        text, setup = _render(scheduler, kw)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(text, nl=False)
    if kw["check"]:
        try:  # the queue's nodes first: the schedulers' own refusals do not say which field
            with naming_the_source(scheduler, _explicit(kw)):
                check_queue(scheduler, setup.shape, setup.dialect)
        except ValueError as exc:
            click.echo(f"REFUSED: {exc}", err=True)
            sys.exit(1)
        ok, verdict = check_script(scheduler, text)
        if ok is None:
            click.echo(f"not checked: {verdict}", err=True)
            return
        click.echo(f"{'accepted' if ok else 'REFUSED'} by {scheduler}: {verdict}", err=True)
        sys.exit(0 if ok else 1)


#: Command-line options that are cluster options of the same name (resolved with the config).
_OPTIONS = ("profile", "nodes", "gpus_per_node", "cpus_per_gpu", "memory_per_gpu",
            "memory_per_node", "walltime", "queue", "account", "job_name", "gpu_type",
            "exclusive", "launcher", "one_task_per", "python", "log_directory")


def _explicit(kw: dict) -> dict:
    """The options the user gave, under the Python API's names (None: not given)."""
    explicit = {name: kw[name] for name in _OPTIONS}
    explicit["site"] = parse_site_options(kw["site"]) or None
    explicit["job_extra_directives"] = list(kw["extra"]) or None
    explicit["job_script_prologue"] = list(kw["prologue"]) or None
    if kw["container"]:
        explicit["container"] = {"image": kw["container"], **({"runtime": kw["container_runtime"]}
                                                              if kw["container_runtime"] else {})}
    explicit.update(given_flags(kw))  # None: dask-cuda's explicit None (no pool, no spilling)
    return explicit


def _render(scheduler: str, kw: dict) -> tuple[str, ClusterSetup]:
    """The script, through the Python API's own resolution and validation (:func:`prepare`)."""
    setup = prepare(scheduler, _explicit(kw))
    shape, options = setup.shape, setup.job_options
    launcher = setup.launcher
    if kw["gpu_binding"] != "gpus-per-task":
        launcher = get_launcher(launcher.name, kw["gpu_binding"], kw["one_task_per"])
        launcher.validate(shape, setup.dialect.multi_node_launchers)
    address = kw["scheduler_address"]
    memory = shape.gpu_memory
    worker = WorkerCommand(
        scheduler=address, scheduler_file=None if address else kw["scheduler_file"],
        nthreads=shape.cpus_per_gpu, memory_limit=str(memory) if memory else "auto",
        interface=setup.network_options.get("worker_interface")
        or setup.network_options.get("interface"),
        local_directory=options["local_directory"],
        http_address=setup.job_options.get("worker_http_address"),
        death_timeout=int(options["death_timeout"] or 120),
        extra=tuple(str(arg) for arg in options["worker_extra_args"]),
        gpu=setup.gpu_options,  # dask-cuda's worker flags, or keywords from the configuration
    )
    script = worker_job_script(
        shape, setup.dialect, launcher, worker, python=options["python"],
        log_directory=options["log_directory"], shebang=options["shebang"],
        **{name: tuple(options[name]) for name in (
            "job_extra_directives", "job_directives_skip", "job_script_prologue",
            "job_script_epilogue")},
        container=options.get("container"),  # with the paths the worker command names bound
        binds=worker_binds(worker, options["log_directory"]) if options.get("container") else (),
    )
    return render(script), setup
