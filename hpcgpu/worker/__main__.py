"""``python -m hpcgpu.worker <scheduler> [options]``: one Dask worker (with a nanny) per GPU.

The options are those :class:`hpcgpu.worker_command.WorkerCommand` renders; anything else
is passed to ``dask worker`` unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click

from hpcgpu.worker.gpusetup import GPUSetup
from hpcgpu.worker.placement import JOB_ID_VARIABLES, placement_from_env
from hpcgpu.worker.walltime import forward_drain_to_children, lifetime_options

__all__ = ["main"]


def _dask_worker_argv(scheduler, options: dict, name: str, extra: tuple[str, ...]) -> list[str]:
    argv = [scheduler] if scheduler else []
    flags = {
        "scheduler_file": "--scheduler-file", "nthreads": "--nthreads",
        "memory_limit": "--memory-limit", "death_timeout": "--death-timeout",
        "protocol": "--protocol", "interface": "--interface", "tls_ca_file": "--tls-ca-file",
        "tls_cert": "--tls-cert", "tls_key": "--tls-key", "local_directory": "--local-directory",
        "lifetime": "--lifetime",
    }
    for key, flag in flags.items():
        if options.get(key) is not None:
            argv += [flag, str(options[key])]
    argv += ["--name", name, "--nworkers", "1", "--resources", "GPU=1", "--no-dashboard",
             "--preload", "hpcgpu.worker.preload",
             "--worker-class", "hpcgpu.worker.gpuworker.GPUWorker"]
    return argv + list(extra)


def _spawn_per_gpu(gpus: int) -> int:
    """The ``direct`` launcher: one child per GPU of this node; returns the worst exit code."""
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    argv = [a for a in sys.argv[1:]]
    children = []
    for local in range(gpus):
        env = dict(os.environ, HPCGPU_LOCAL_RANK=str(local), HPCGPU_NODE_RANK="0",
                   CUDA_VISIBLE_DEVICES=visible[local % len(visible)] if visible else str(local))
        child_argv = [sys.executable, "-m", "hpcgpu.worker", *_without_launcher(argv)]
        children.append(subprocess.Popen(child_argv, env=env))

    def forward(signum, _frame):
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    return max((child.wait() for child in children), default=0)


def _without_launcher(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--launcher", "--gpus-per-node"):
            skip = True
            continue
        if arg.startswith(("--launcher=", "--gpus-per-node=")):
            continue
        out.append(arg)
    return out


@click.command(context_settings=dict(ignore_unknown_options=True, allow_extra_args=True))
@click.argument("scheduler", required=False)
@click.option("--scheduler-file", default=None)
@click.option("--name", default=None, help="Name prefix; the worker appends -<node>-<gpu>.")
@click.option("--nthreads", type=int, default=1)
@click.option("--memory-limit", default="auto")
@click.option("--death-timeout", default=None)
@click.option("--protocol", default=None)
@click.option("--interface", default=None)
@click.option("--tls-ca-file", default=None)
@click.option("--tls-cert", default=None)
@click.option("--tls-key", default=None)
@click.option("--local-directory", default=None)
@click.option("--lifetime", default=None)
@click.option("--walltime", type=float, default=None,
              help="The job's walltime (s): retire gracefully before the job ends.")
@click.option("--retire-before", default=None, help="Retire this long before the end (or off).")
@click.option("--lifetime-stagger", default=None, help="Spread of the retirement times.")
@click.option("--launcher", default=None)
@click.option("--gpus-per-node", type=int, default=None)
@click.option("--rmm-pool-size", default="auto", show_default=True,
              help="RMM pool: auto (90% of the GPU), a size (40GB), a fraction (0.9) or none.")
@click.option("--rmm-async", is_flag=True, help="cudaMallocAsync instead of an RMM pool.")
@click.option("--device-memory-limit", default="auto", show_default=True,
              help="Spill device memory to host beyond this: auto (80%), a size, a fraction or none.")
@click.option("--cpu-affinity/--no-cpu-affinity", default=True, show_default=True,
              help="Pin to the CPU cores near the GPU (within the allowed cpuset).")
@click.pass_context
def main(ctx: click.Context, scheduler, launcher, gpus_per_node, rmm_pool_size, rmm_async,
         device_memory_limit, cpu_affinity, walltime, retire_before, lifetime_stagger,
         **options) -> None:
    """Start one Dask worker pinned to this process's GPU."""
    if scheduler is None and options["scheduler_file"] is None:
        raise click.UsageError("give the scheduler address or --scheduler-file")
    try:
        setup = GPUSetup(rmm_pool_size=rmm_pool_size, rmm_async=rmm_async,
                         device_memory_limit=device_memory_limit, cpu_affinity=cpu_affinity)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    os.environ.update(setup.to_env())
    if launcher == "direct" and (gpus_per_node or 1) > 1:
        sys.exit(_spawn_per_gpu(gpus_per_node))
    place = placement_from_env(options.pop("name"))
    os.environ.update(
        HPCGPU_GPU=place.gpu or "", HPCGPU_NODE_RANK=str(place.node),
        HPCGPU_LOCAL_RANK=str(place.local_rank),
        HPCGPU_JOB_ID=next((os.environ[v] for v in JOB_ID_VARIABLES if os.environ.get(v)), ""),
    )
    if place.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = place.gpu
    from distributed.cli.dask_worker import main as dask_worker

    extra = tuple(ctx.args)
    if options["lifetime"] is None:
        extra += tuple(lifetime_options(walltime, retire_before, lifetime_stagger, extra))
    forward_drain_to_children()
    dask_worker.main(args=_dask_worker_argv(scheduler, options, place.name, extra),
                     prog_name="hpcgpu.worker")


if __name__ == "__main__":
    main()
