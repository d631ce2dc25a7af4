"""The example job scripts in ``jobscripts/``, rendered from the package's one template.

``jobscripts/cluster/`` holds the worker jobs that cluster mode submits; ``jobscripts/``
itself the ready-to-submit batch-mode scripts that run ``hpcgpu run``. Regenerate both with
``python -m hpcgpu.jobspec.examples jobscripts`` (``--help`` for the options); a test renders them
again and compares byte for byte.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
import shlex

import click

from hpcgpu.jobspec.container import Container
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.launchers import get_launcher
from hpcgpu.jobspec.render import HAS_HPCGPU, JobScript, render, worker_job_script
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.system.pymain import SAFE_MAIN
from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = [
    "EXAMPLES", "render_examples", "write_examples",
    "BATCH_EXAMPLES", "render_batch_examples", "write_batch_examples", "write_all",
]

_WORKER = WorkerCommand(scheduler_file="hpcgpu-scheduler.json", nthreads=8)
_SHAPE = dict(cpus_per_gpu=8, memory_per_gpu="60GiB", walltime="01:00:00", job_name="hpcgpu")

#: file name -> (scheduler, site options, launcher, shape options)
EXAMPLES: dict[str, tuple[str, dict, str, dict]] = {
    "slurm-1x4.sh": ("slurm", {}, "srun", dict(nodes=1, gpus_per_node=4)),
    "slurm-2x4.sh": ("slurm", {}, "srun", dict(nodes=2, gpus_per_node=4)),
    "slurm-2x4-gres-h100.sh": (
        "slurm", {"gpu_directive": "gres"}, "srun",
        dict(nodes=2, gpus_per_node=4, gpu_type="h100", queue="gpu", account="proj123"),
    ),
    "slurm-2x4-mpirun.sh": ("slurm", {}, "mpirun", dict(nodes=2, gpus_per_node=4)),
    "pbs-1x4.sh": ("pbs", {}, "mpiexec", dict(nodes=1, gpus_per_node=4)),
    "pbs-2x4.sh": ("pbs", {}, "mpiexec", dict(nodes=2, gpus_per_node=4, queue="gpu")),
    "pbs-2x4-gpus-a100.sh": (
        "pbs", {"gpu_resource": "gpus", "gpu_type_resource": "gpu_type"}, "mpiexec",
        dict(nodes=2, gpus_per_node=4, gpu_type="a100", account="proj123", exclusive=True),
    ),
    "lsf-1x4.sh": ("lsf", {}, "jsrun", dict(nodes=1, gpus_per_node=4)),
    "lsf-2x4.sh": ("lsf", {}, "jsrun", dict(nodes=2, gpus_per_node=4, queue="batch")),
    "lsf-2x6-v100-gb.sh": (
        "lsf", {"memory_unit": "GB"}, "jsrun",
        dict(nodes=2, gpus_per_node=6, cpus_per_gpu=7, gpu_type="TeslaV100_SXM2_16GB",
             account="abc123"),
    ),
    "slurm-1x4-dask-cuda.sh": ("slurm", {}, "srun", dict(nodes=1, gpus_per_node=4)),
    "sge-1x4.sh": ("sge", {}, "direct", dict(nodes=1, gpus_per_node=4)),
    "sge-2x4.sh": (
        "sge", {"multi_node_parallel_environment": "mpi-4"}, "mpirun",
        dict(nodes=2, gpus_per_node=4),
    ),
    "sge-1x4-gpus-job.sh": (
        "sge", {"gpu_complex": "gpus", "gpu_consumable": "job", "memory_resource": "mem_free"},
        "direct", dict(nodes=1, gpus_per_node=4, queue="gpu.q"),
    ),
    "flux-2x4.sh": ("flux", {}, "flux", dict(nodes=2, gpus_per_node=4, memory_per_gpu=None,
                                             queue="gpu", account="proj123")),
    "slurm-1x4-apptainer.sh": ("slurm", {}, "srun", dict(nodes=1, gpus_per_node=4)),
    "slurm-1x4-singularity.sh": ("slurm", {}, "srun", dict(nodes=1, gpus_per_node=4)),
    "slurm-1x4-podman-hpc.sh": ("slurm", {}, "srun", dict(nodes=1, gpus_per_node=4)),
}

#: file name -> the workers' container (SLURMCluster(container=...) renders these), with the
#: paths a cluster binds for them: its log directory, holding its private directory
CONTAINERS: dict[str, Container] = {
    "slurm-1x4-apptainer.sh": Container("/sw/images/hpcgpu.sif", binds=("/scratch",)),
    "slurm-1x4-singularity.sh": Container("/sw/images/hpcgpu.sif", runtime="singularity"),
    "slurm-1x4-podman-hpc.sh": Container("registry.example.org/me/hpcgpu:0.1", runtime="podman-hpc"),
}
_CONTAINER_BINDS = ("/home/me/.cache/hpcgpu/logs",)


#: file name -> dask-cuda's worker keywords (SLURMCluster(rmm_pool_size=...) renders these)
GPU_OPTIONS: dict[str, dict] = {
    "slurm-1x4-dask-cuda.sh": dict(
        device_memory_limit="50GB", enable_cudf_spill=True, rmm_pool_size="40GB",
        rmm_maximum_pool_size="70GB", rmm_allocator_external_lib_list="cupy",
        rmm_log_directory="logs/rmm", pre_import="cudf,rmm"),
}


def render_examples() -> dict[str, str]:
    """Render every example; returns file name -> text."""
    texts = {}
    for filename, (scheduler, site, launcher, shape_options) in EXAMPLES.items():
        shape = GPUJobShape.create(**{**_SHAPE, **shape_options})
        script = worker_job_script(
            shape, get_dialect(scheduler, **site), get_launcher(launcher),
            dataclasses.replace(_WORKER, nthreads=shape.cpus_per_gpu, gpu=GPUWorkerOptions.from_dask_cuda(
                **GPU_OPTIONS[filename]) if filename in GPU_OPTIONS else None),
            log_directory="logs", container=CONTAINERS.get(filename),
            binds=_CONTAINER_BINDS if filename in CONTAINERS else (),
        )
        texts[filename] = render(script)
    return texts


def _write(directory: str | Path, texts: dict[str, str]) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for filename, text in texts.items():
        path = directory / filename
        path.write_text(text)
        paths.append(path)
    return paths


def write_examples(directory: str | Path) -> list[Path]:
    """Write every example into ``directory``; returns the paths written."""
    return _write(directory, render_examples())


#: file name -> (scheduler, submit command, launcher, shape options, extra directives)
BATCH_EXAMPLES: dict[str, tuple[str, str, str, dict, tuple[str, ...]]] = {
    "slurm-2x4.sbatch": ("slurm", "sbatch", "srun", dict(nodes=2, gpus_per_node=4),
                         ("--signal=B:USR1@120",)),
    "slurm-2x4-mpirun.sbatch": ("slurm", "sbatch", "mpirun", dict(nodes=2, gpus_per_node=4),
                                ("--signal=B:USR1@120",)),
    "pbs-2x4.pbs": ("pbs", "qsub", "mpiexec", dict(nodes=2, gpus_per_node=4), ()),
    "lsf-2x4.lsf": ("lsf", "bsub <", "jsrun", dict(nodes=2, gpus_per_node=4),
                    ("-wa USR1", "-wt 2")),
    "sge-1x4.sge": ("sge", "qsub", "direct", dict(nodes=1, gpus_per_node=4), ()),
    "sge-2x4.sge": ("sge", "qsub", "mpirun", dict(nodes=2, gpus_per_node=4), ()),
}

#: file name -> the site's dialect options a batch example needs (a PE that spans hosts)
BATCH_SITE: dict[str, dict] = {"sge-2x4.sge": {"multi_node_parallel_environment": "mpi-4"}}

#: What each batch system does not do for the job that sbatch does: start it in the
#: submission directory (PBS), give it the submitter's PATH, hence the python that has
#: hpcgpu (Grid Engine passes it as SGE_O_PATH only).
_CHANGE_DIRECTORY = {"pbs": ('cd "${PBS_O_WORKDIR:-.}"',),
                     "sge": ('export PATH="${SGE_O_PATH:+$SGE_O_PATH:}$PATH"',)}


#: How a submitter gives the job the right python, in each batch system's words (what it
#: passes: sbatch and bsub the environment, Grid Engine's script its PATH, PBS neither).
_FIX_PYTHON = {
    "sbatch": "activate the environment that has hpcgpu before sbatch, or set HPCGPU_PYTHON=/path/to/its/python",
    "qsub": "activate the environment that has hpcgpu before qsub, or qsub -v HPCGPU_PYTHON=/path/to/its/python",
    "bsub <": "activate the environment that has hpcgpu before bsub, or set HPCGPU_PYTHON=/path/to/its/python",
}
_FIX_PYTHON_PBS = ("qsub -V from the environment that has hpcgpu activated, "
                   "or qsub -v HPCGPU_PYTHON=/path/to/its/python")


def _python_check(scheduler: str, submit: str) -> tuple[str, ...]:
    """Lines that stop the job at once, saying what to do, when its python has no hpcgpu.

    Without them, a script submitted from a shell without the environment is accepted and
    ends a second later with only ``/usr/bin/python3: No module named hpcgpu`` (#43).
    The check is :data:`~hpcgpu.jobspec.render.HAS_HPCGPU`, as in cluster mode's scripts.
    """
    fix = _FIX_PYTHON_PBS if scheduler == "pbs" else _FIX_PYTHON[submit]
    return (
        "# first, the python: without hpcgpu it could only say 'No module named hpcgpu'",
        f'if ! "${{HPCGPU_PYTHON:=python3}}" -c {HAS_HPCGPU} 2>/dev/null; then',
        f'  echo "hpcgpu: $HPCGPU_PYTHON ($(command -v "$HPCGPU_PYTHON" || echo not found)) on $HOSTNAME '
        f'has no hpcgpu: {fix} (docs/batch.md)" >&2',
        "  exit 2",
        "fi",
    )


def _batch_header(filename: str, submit: str, launcher: str, shape: GPUJobShape) -> tuple[str, ...]:
    takes_args = not submit.endswith("<") and not filename.startswith("pbs")
    usage = (f"{submit} {filename} my_script.py [arguments...]" if takes_args
             else f"HPCGPU_SCRIPT='my_script.py [arguments...]' {submit} {filename}")
    if filename.startswith("pbs"):
        usage = f"qsub -v HPCGPU_SCRIPT='my_script.py [arguments...]' {filename}"
    return (
        f"hpcgpu batch mode: {shape.nodes} node(s) x {shape.gpus_per_node} GPU(s), one Dask "
        f"worker per GPU, started by {launcher}.",
        f"Submit:  {usage}",
        "`hpcgpu run` starts the Dask scheduler on the first node (it takes no GPU), the workers,",
        "then the script with DASK_SCHEDULER_ADDRESS set (hpcgpu.get_client() connects to it);",
        "the job's exit code is the script's, and everything stops at the end or on a signal.",
        "HPCGPU_PYTHON: the python that has hpcgpu installed (default python3). Edit the",
        "directives for your site (hpcgpu jobscript --help shows the options). Guide: docs/batch.md",
    )


def render_batch_examples() -> dict[str, str]:
    """Render every batch-mode example; returns file name -> text."""
    texts = {}
    for filename, (scheduler, submit, launcher, shape_options, extra) in BATCH_EXAMPLES.items():
        shape = GPUJobShape.create(**{**_SHAPE, **shape_options})
        script = JobScript(
            shape, get_dialect(scheduler, **BATCH_SITE.get(filename, {})), get_launcher(launcher),
            # as -m, without the submit directory (often shared) first on sys.path
            f'exec "${{HPCGPU_PYTHON:-python3}}" -c {shlex.quote(SAFE_MAIN)} hpcgpu run --launcher {launcher} "$@"',
            launch=False, log_directory=".", job_extra_directives=extra,
            job_script_prologue=_CHANGE_DIRECTORY.get(scheduler, ()) + _python_check(scheduler, submit) + (
                '[ $# -gt 0 ] || set -- ${HPCGPU_SCRIPT:?"name the script to run: see Submit above"}',
            ),
            header=_batch_header(filename, submit, launcher, shape),
        )
        texts[filename] = render(script)
    return texts


def write_batch_examples(directory: str | Path) -> list[Path]:
    """Write every batch-mode example into ``directory``; returns the paths written."""
    return _write(directory, render_batch_examples())


def write_all(root: str | Path, kind: str = "all") -> list[Path]:
    """Write the examples under ``root``: batch scripts into it, worker jobs into ``root/cluster``.

    ``kind="cluster"`` or ``"batch"`` writes only that kind, straight into ``root``. A
    ``root`` named ``cluster`` with ``kind="all"`` is refused: it is the worker jobs'
    folder, and the scripts would land in ``cluster/cluster``.

    >>> write_all("jobscripts/cluster")
    Traceback (most recent call last):
    ...
    ValueError: jobscripts/cluster is the worker jobs' folder: give its parent (python -m hpcgpu.jobspec.examples jobscripts), or --kind cluster to write only the worker jobs into it
    """
    root = Path(root)
    if kind == "all" and root.name == "cluster":
        raise ValueError(f"{root} is the worker jobs' folder: give its parent (python -m "
                         f"hpcgpu.jobspec.examples {root.parent}), or --kind cluster to write only the "
                         "worker jobs into it")
    if kind == "cluster":
        return write_examples(root)
    if kind == "batch":
        return write_batch_examples(root)
    return write_examples(root / "cluster") + write_batch_examples(root)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("root", default="jobscripts", type=click.Path(file_okay=False))
@click.option("--kind", default="all", show_default=True,
              type=click.Choice(["all", "cluster", "batch"]),
              help="all: batch scripts into ROOT and worker jobs into ROOT/cluster; "
                   "cluster or batch: only those, into ROOT.")
def main(root: str, kind: str) -> None:
    """Render the example job scripts of jobscripts/ into ROOT (default: jobscripts)."""
    try:
        written = write_all(root, kind)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for path in written:
        click.echo(path)


if __name__ == "__main__":  # pragma: no cover - the regeneration command
    main(prog_name="python -m hpcgpu.jobspec.examples")
