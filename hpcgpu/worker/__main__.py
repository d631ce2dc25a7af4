"""``python -m hpcgpu.worker <scheduler> [options]``: one Dask worker (with a nanny) per GPU.

The options are those :class:`hpcgpu.jobspec.worker_command.WorkerCommand` renders; anything else
is passed to ``dask worker`` unchanged.
"""

from __future__ import annotations

import os
import signal
import sys

import click

from hpcgpu.jobspec.gpuflags import GPU_OPTION_NAMES, gpu_flags, options_from_flags
from hpcgpu.jobspec.dialects.arrays import element_name
from hpcgpu.system.spawn import start_process
from hpcgpu.system.pymain import module_argv
from hpcgpu.system.schedfile import address_from_file
from hpcgpu.system.scratch import scratch_directory
from hpcgpu.worker.ucxpool import let_ucx_use_the_worker_pool
from hpcgpu.worker.http import http_argv
from hpcgpu.worker.hostmemory import gpu_workers_on_host, host_memory_limit
from hpcgpu.worker.startfailure import with_restart_limit
from hpcgpu.worker.nannies import gpu_environment, use_forkserver, use_pinned_nannies
from hpcgpu.worker.placement import Placement, job_id_from_env, node_placements, placement_from_env
from hpcgpu.worker.walltime import forward_drain_to_children, lifetime_options
from hpcgpu.jobspec.worker_command import split_resources

__all__ = ["main", "merged_resources"]


def _dask_worker_argv(scheduler, options: dict, name: str, nworkers: int,
                      extra: tuple[str, ...]) -> list[str]:
    argv = [scheduler] if scheduler else []
    flags = {
        "scheduler_file": "--scheduler-file", "nthreads": "--nthreads",
        "memory_limit": "--memory-limit", "death_timeout": "--death-timeout",
        "protocol": "--protocol", "interface": "--interface", "tls_ca_file": "--tls-ca-file",
        "tls_cert": "--tls-cert", "tls_key": "--tls-key", "local_directory": "--local-directory",
        "lifetime": "--lifetime",
    }
    if not any(a.split("=")[0] == "--local-directory" for a in extra):  # never another user's
        options = {**options, "local_directory": options.get("local_directory") or scratch_directory()}
    for key, flag in flags.items():
        if options.get(key) is not None:
            argv += [flag, str(options[key])]
    resources, extra = merged_resources(extra)
    argv += ["--name", name, "--nworkers", str(nworkers), "--resources", resources,
             # the HTTP server starts without the dashboard too: loopback unless asked
             "--no-dashboard", *http_argv(options.get("http_address"), extra),
             "--preload", "hpcgpu.worker.preload",
             "--worker-class", "hpcgpu.worker.gpuworker.GPUWorker"]
    return argv + list(extra)


def merged_resources(extra: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``GPU=1`` and the ``--resources`` given in ``extra`` (a pool's name, e.g.
    ``pool-gpu=1``), as ONE option: ``dask worker`` keeps only the last ``--resources``.

    >>> merged_resources(("--resources", "pool-big=1", "--lifetime", "1h"))
    ('GPU=1,pool-big=1', ('--lifetime', '1h'))
    >>> merged_resources(("--resources=A=2 B=1",))
    ('GPU=1,A=2,B=1', ())
    """
    given, rest = split_resources(extra)
    return ",".join(f"{k}={v:g}" for k, v in {"GPU": 1.0, **given}.items()), rest


def _spawn_per_gpu(places: list[Placement]) -> int:
    """Without a nanny (``--no-nanny``) a process holds one worker: one child per GPU."""
    argv = _without_launcher(sys.argv[1:])
    # each ends with this process, however it ends (a launcher's SIGKILL included)
    children = [start_process(module_argv([sys.executable, "-m", "hpcgpu.worker", *argv]),
                              env=dict(os.environ, **gpu_environment(place)))
                for place in places]

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


def _require_ucx(protocol: str) -> None:
    """Fail now, with the fix, when UCX is asked for and cannot load (never fall back here:
    the scheduler and the other workers speak UCX)."""
    from hpcgpu.network import INSTALL_HINT, UCX_PROTOCOLS, ucx_unavailable_reason

    if protocol.lower() not in UCX_PROTOCOLS:
        return
    reason = ucx_unavailable_reason()
    if reason is not None:
        raise click.ClickException(f"protocol {protocol!r} needs UCX but {reason}: {INSTALL_HINT}")
    from hpcgpu.worker.gpuinfo import nvml_library

    if nvml_library() is None:  # CPU mode (no driver): UCX must not ask for CUDA
        import dask

        for key in ("create-cuda-context", "cuda-copy", "nvlink"):
            if dask.config.get(f"distributed-ucxx.{key}", None):
                dask.config.set({f"distributed-ucxx.{key}": False})


def _check_network(scheduler: str | None, options: dict) -> None:
    """Exit now, naming host, address and fix, when this host cannot reach the scheduler
    (rather than after ``--death-timeout`` with a Dask timeout), or when the InfiniBand port
    behind its interface is not ACTIVE; with UCX, pin ``UCX_NET_DEVICES`` to that port."""
    from hpcgpu.worker.ibsetup import use_infiniband_port
    from hpcgpu.worker.reach import NetworkCheckError, check_worker_network

    try:
        use_infiniband_port(options["interface"], options["protocol"] or (scheduler or "").split("://")[0])
        check_worker_network(scheduler, options["interface"], security_args=options)
    except NetworkCheckError as error:
        print(f"NetworkCheckError: {error}", file=sys.stderr, flush=True)
        sys.exit(1)


def _start_fork_server_then_threads(ctx, method, nworkers: int, scheduler: str | None, options: dict) -> None:
    """The nannies' fork server first, then this process's threads: a thread that runs
    before it makes the launcher fall back to Python's server (a second interpreter, and a
    socket under TMPDIR that a long TMPDIR does not fit)."""
    if "--no-nanny" not in ctx.args:  # without a nanny the worker runs in this process
        use_forkserver(method, nworkers, options["protocol"] or (scheduler or "").split("://")[0])
    from hpcgpu.worker.linkwatch import watch_link

    watch_link(options["interface"])  # a link lost later is said in the job's log at once


class _GPUCount(click.ParamType):
    """A whole number of at least 1, or ``all`` (every GPU this task sees)."""

    name = "N|all"

    def convert(self, value, param, ctx):
        if value in (None, "all") or (isinstance(value, int) and value >= 1):
            return value
        if str(value).isdigit() and int(value) >= 1:
            return int(value)
        self.fail(f"{value!r} is not a whole number of at least 1, nor 'all'", param, ctx)


_GPU_COUNT = _GPUCount()


def _take_gpu_options(options: dict) -> None:
    """The GPU flags out of ``options``, into this process's environment (the nannies hand
    it down to their workers) and dask config."""
    try:
        gpu = options_from_flags(options)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    for name in GPU_OPTION_NAMES:
        options.pop(name)
    os.environ.update(gpu.to_env())
    if gpu.ucx_config():  # the nannies hand this process's dask config to their workers
        import dask

        dask.config.set(gpu.ucx_config())
    if gpu.hpcgpu_pool or gpu.rmm_pool_size is not None or gpu.rmm_async:
        # the nannies of this process never receive device frames: no UCX pool here either
        let_ucx_use_the_worker_pool("rmm-pool (the workers')")


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
@click.option("--http-address", default=None,
              help="Where each worker's HTTP server (/health, /metrics) listens. Default: "
                   "hpcgpu.defaults.worker-http-address, else 127.0.0.1:0 (this node only).")
@click.option("--walltime", type=float, default=None,
              help="The job's walltime (s): retire gracefully before the job ends.")
@click.option("--retire-before", default=None, help="Retire this long before the end (or off).")
@click.option("--lifetime-stagger", default=None, help="Spread of the retirement times.")
@click.option("--launcher", default=None, help="The launcher that started this task (informative).")
@click.option("--gpus-per-node", type=_GPU_COUNT, default=None,
              help="This task is its node's only one: start a nanny and worker per GPU "
                   "(all: one per GPU in CUDA_VISIBLE_DEVICES).")
@gpu_flags
@click.option("--multiprocessing-method", default=None,
              type=click.Choice(["forked-server", "forkserver", "spawn", "fork"]),
              help="How nannies start worker processes. Default: a method set in dask's "
                   "config; else forked-server (worker processes forked from a server "
                   "forked from this process: one start-up per node); with UCX, "
                   "forkserver (Python's own server) for several GPUs, else spawn.")
@click.pass_context
def main(ctx: click.Context, scheduler, launcher, gpus_per_node, multiprocessing_method,
         walltime, retire_before, lifetime_stagger, **options) -> None:
    """Start Dask workers pinned to GPUs: this task's GPU, or with --gpus-per-node one per GPU
    of the node."""
    if scheduler is None and options["scheduler_file"] is None:
        raise click.UsageError("give the scheduler address or --scheduler-file")
    if scheduler is None:  # read here, checked (no other user could have written it): #38
        try:
            scheduler = address_from_file(options["scheduler_file"], timeout=options["death_timeout"])
        except (ValueError, TimeoutError) as error:
            raise click.UsageError(str(error)) from None
        options["scheduler_file"] = None
    _require_ucx(options["protocol"] or (scheduler or "").split("://")[0])
    _take_gpu_options(options)  # first: the InfiniBand check reads the UCX config it sets
    _check_network(scheduler, options)  # before distributed's import: its error comes sooner
    os.environ["HPCGPU_JOB_ID"] = job_id_from_env()
    try:  # an array element names its workers from its index
        prefix = element_name(options.pop("name"), os.environ)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    if gpus_per_node is None:  # one task per GPU: the launcher said which
        place = placement_from_env(prefix)
        os.environ.update(gpu_environment(place))
        name, nworkers = place.name, 1
    else:  # one task per node: a nanny per GPU
        try:
            places = node_placements(prefix, gpus_per_node)
        except ValueError as error:
            raise click.UsageError(str(error)) from None
        if "--no-nanny" in ctx.args and len(places) > 1:
            sys.exit(_spawn_per_gpu(places))
        name, nworkers = use_pinned_nannies(places), len(places)
    gpu_workers = nworkers if gpus_per_node is not None else gpu_workers_on_host(os.environ)
    options["memory_limit"] = host_memory_limit(options["memory_limit"], gpu_workers)
    _start_fork_server_then_threads(ctx, multiprocessing_method, nworkers, scheduler, options)
    from distributed.cli import dask_worker as cli
    from distributed.cli.dask_worker import main as dask_worker
    from hpcgpu.network.schemes import register as register_schemes

    register_schemes()  # the nannies listen in this process: ucx+auth:// without entry points
    cli.Nanny = with_restart_limit(cli.Nanny)  # a restart storm ends the job, reported

    extra = tuple(ctx.args)
    if options["lifetime"] is None:
        extra += tuple(lifetime_options(walltime, retire_before, lifetime_stagger, extra))
    forward_drain_to_children()
    dask_worker.main(args=_dask_worker_argv(scheduler, options, name, nworkers, extra),
                     prog_name="hpcgpu.worker")


if __name__ == "__main__":
    main()
