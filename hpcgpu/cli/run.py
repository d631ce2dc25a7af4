"""``hpcgpu run [options] script.py [args...]``: batch mode inside one allocation."""

from __future__ import annotations

import dataclasses
import sys

import click

from hpcgpu.jobspec.container import RUNTIMES, container_option
from hpcgpu.jobspec.gpuflags import flag_argv, gpu_flags, options_from_flags
from hpcgpu.jobspec.gpukeywords import SWITCHES, switch_network
from hpcgpu.launchers import LAUNCHERS

__all__ = ["run"]


@click.command(context_settings=dict(allow_interspersed_args=False))
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--launcher", type=click.Choice(sorted(LAUNCHERS)), default=None,
              help="How workers start (default: srun on SLURM, mpiexec on PBS, jsrun on LSF, "
                   "mpirun on multi-node SGE, direct on one node).")
@click.option("--launcher-args", default=None, metavar="'ARGS'",
              help="More launcher arguments, shell-quoted, e.g. '--oversubscribe'.")
@click.option("--nodes", type=int, default=None, help="Nodes (default: the allocation's).")
@click.option("--gpus-per-node", type=int, default=None,
              help="GPUs per node (default: from the batch system, CUDA_VISIBLE_DEVICES or nvidia-smi).")
@click.option("--min-workers", type=int, default=None,
              help="Workers to wait for before the script starts (default: one per GPU).")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds to wait for --min-workers.")
@click.option("--tls/--no-tls", default=True, show_default=True,
              help="Encrypt and authenticate with a job-private temporary certificate.")
@click.option("--key-files/--no-key-files", default=True, show_default=True,
              help="Write the certificate and key to the job directory (0600) for the "
                   "scheduler, workers and script; --no-key-files: no file, they get them in "
                   "their environment (--launcher direct or srun, which pass it to every task).")
@click.option("--protocol", default=None,
              help="ucx (UCX for scheduler, workers and script; UCX carries no TLS), ucx+auth "
                   "(UCX whose connections prove a job-private key), or without TLS: tcp (default).")
@click.option("--interface", default=None, help="Network interface, e.g. ib0.")
@click.option("--transports", default=None,
              help="UCX transports: auto (default) or some of infiniband,nvlink,rdmacm,tcp "
                   "(or dask cuda worker's --enable-nvlink... switches below).")
@click.option("--fallback", default=None,
              help="tcp/tls: use it, with a warning, when UCX cannot load (default: fail).")
@click.option("--dashboard-address", default="127.0.0.1:8787", show_default=True,
              help="Dashboard address: this node only by default (the log says how to reach "
                   "it with ssh -L); ':8787' for every interface (no password); '' turns it off.")
@click.option("--nthreads", type=int, default=1, show_default=True, help="Threads per worker.")
@click.option("--memory-limit", default="auto", show_default=True, help="Host memory per worker.")
@click.option("--worker-args", default=None, metavar="'ARGS'",
              help="More worker arguments, shell-quoted (passed to dask worker).")
@click.option("--work-dir", default=None,
              help="Parent of the job-private directory (certificates, scheduler file); "
                   "must be on a filesystem every node sees, and no other user may be able to "
                   "change it or a directory above it (a sticky one such as /tmp is fine). "
                   "Default: ~/.cache/hpcgpu/logs/.hpcgpu-<uid>.")
@click.option("--keep-work-dir", is_flag=True, help="Keep the job directory at the end.")
@click.option("--grace", type=float, default=10.0, show_default=True,
              help="Seconds processes get to stop before SIGKILL.")
@click.option("--container", default=None, metavar="IMAGE",
              help="Run the workers in this image (a .sif file, a sandbox directory or a URI; "
                   "the scheduler and SCRIPT stay here): apptainer exec --nv, the job "
                   "directory bound (docs/containers.md).")
@click.option("--container-runtime", type=click.Choice(sorted(RUNTIMES)), default="apptainer",
              show_default=True, help="The runtime that starts --container.")
@click.option("--container-bind", multiple=True, metavar="PATH",
              help="More host paths the workers need, bound at the same path (repeatable).")
@click.option("--container-python", default="python3", show_default=True,
              help="The image's python, which has hpcgpu.")
@gpu_flags
def run(script: str, args: tuple[str, ...], **kw) -> None:
    """Run SCRIPT with a Dask cluster of one worker per GPU of this allocation.

    Run it once, in the batch script (not under srun/mpirun): it starts the scheduler on
    this node, the workers through the launcher, waits for them, runs SCRIPT with
    DASK_SCHEDULER_ADDRESS set (hpcgpu.get_client() or distributed.Client() connect),
    stops everything and exits with SCRIPT's exit code.

    \b
    Example (in an sbatch script):
      hpcgpu run --min-workers 6 analysis.py --input data/
    """
    from hpcgpu.runner.batch import BatchOptions, run_batch
    from hpcgpu.runner.launch import split_args

    try:
        gpu = options_from_flags(kw)  # dask cuda worker's flags, checked before anything starts
        protocol, transports = switch_network(kw["protocol"], kw["transports"], gpu)
        worker_gpu = dataclasses.replace(gpu, **{k: None for k in SWITCHES})
        options = BatchOptions(
            script=script, args=args, launcher=kw["launcher"],
            launcher_args=split_args(kw["launcher_args"]), nodes=kw["nodes"],
            gpus_per_node=kw["gpus_per_node"], min_workers=kw["min_workers"],
            timeout=kw["timeout"], tls=kw["tls"], key_files=kw["key_files"], protocol=protocol,
            interface=kw["interface"], transports=transports, fallback=kw["fallback"],
            dashboard_address=kw["dashboard_address"] or None,
            nthreads=kw["nthreads"], memory_limit=kw["memory_limit"],
            worker_args=(*flag_argv(worker_gpu), *split_args(kw["worker_args"])),
            work_dir=kw["work_dir"],
            keep_work_dir=kw["keep_work_dir"], grace=kw["grace"],
            container=container_option(kw["container"] and {
                "image": kw["container"], "runtime": kw["container_runtime"],
                "binds": list(kw["container_bind"])}),
            container_python=kw["container_python"],
        )
        code = run_batch(options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except ImportError as exc:  # UCXUnavailableError: UCX asked for, not loadable, no fallback
        raise click.ClickException(str(exc)) from None
    sys.exit(code)
