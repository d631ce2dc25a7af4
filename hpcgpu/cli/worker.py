"""``hpcgpu worker``: ``dask cuda worker``'s command line, on hpcgpu's worker.

The flags are dask-cuda 26.10's (``dask cuda worker --help``), so a script that starts
workers by hand switches by changing the command name. Like ``dask cuda worker`` it
starts one nanny and worker per GPU in ``CUDA_VISIBLE_DEVICES`` (or per GPU NVML sees);
without a GPU, one worker on the CPU. It runs ``python -m hpcgpu.worker`` in this process:
:func:`entry_argv` is the translation, a pure function.

Differences (docs/migrating.md): workers are named ``<name>-0-<i>`` (dask-cuda:
``<name>-<i>``); without ``--rmm-*`` flags each worker gets hpcgpu's RMM pool (dask-cuda:
none); a worker's dashboard starts only with ``--dashboard`` or ``--dashboard-address``, and
its HTTP server (``/health``, ``/metrics``) listens on ``127.0.0.1`` unless
``--dashboard-address`` says otherwise (dask-cuda: every interface);
``--multiprocessing-method`` defaults to forked-server (dask-cuda: spawn);
``--worker-class`` replaces hpcgpu's ``GPUWorker`` (give a subclass of it to keep the GPU
set-up).
"""

from __future__ import annotations

import os

import click

from hpcgpu.jobspec.gpuflags import flag_argv, gpu_flags, options_from_flags

__all__ = ["worker", "entry_argv", "gpus_here"]

#: dask-cuda's flags that ``python -m hpcgpu.worker`` takes under the same name
_SAME = ("scheduler_file", "nthreads", "name", "memory_limit", "local_directory", "protocol",
         "interface", "death_timeout", "tls_ca_file", "tls_cert", "tls_key")
#: dask-cuda's flags that go on to ``dask worker`` unchanged (when given)
_PASSED = ("host", "worker_port", "listen_address", "contact_address", "pid_file", "resources",
           "dashboard_address", "dashboard_prefix", "worker_class")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def gpus_here(env: dict | None = None) -> int:
    """GPUs a ``dask cuda worker`` here would start workers for: ``CUDA_VISIBLE_DEVICES``'s
    entries where it is set (and not empty), else those NVML sees (0 without a driver).

    Examples
    --------
    >>> gpus_here({"CUDA_VISIBLE_DEVICES": "0,1,2"}), gpus_here({"CUDA_VISIBLE_DEVICES": ""})
    (3, 0)
    """
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    from hpcgpu.worker.gpuinfo import count_gpus

    return count_gpus()


def entry_argv(scheduler: str | None, values: dict, given: set[str], gpus: int,
               preload_argv: tuple[str, ...] = ()) -> list[str]:
    """``python -m hpcgpu.worker``'s argv for ``dask cuda worker``'s parsed flags.

    ``given``: the flags set on the command line (others keep hpcgpu's defaults where
    they differ from dask-cuda's); ``gpus``: GPUs to start a worker for (0: the CPU).

    Examples
    --------
    >>> entry_argv("tcp://h:8786", {"nthreads": 2, "rmm_pool_size": "2GB", "host": "10.0.0.5",
    ...            "preload": ("mod",), "dashboard": True}, {"nthreads", "rmm_pool_size", "host"}, 2)
    ['tcp://h:8786', '--nthreads', '2', '--gpus-per-node', '2', '--rmm-pool-size', '2GB', '--host', '10.0.0.5', '--preload', 'mod']
    """
    argv = [scheduler] if scheduler else []
    for name in _SAME:
        if values.get(name) is not None and (name in given or name == "scheduler_file"):
            argv += [_flag(name), str(values[name])]
    if gpus > 0:
        argv += ["--gpus-per-node", str(gpus)]
    if "multiprocessing_method" in given:
        argv += ["--multiprocessing-method", values["multiprocessing_method"]]
    argv += flag_argv(options_from_flags(values))
    for name in _PASSED:
        if values.get(name) not in (None, "") and name in given:
            argv += [_flag(name), str(values[name])]
    if "dashboard" in given or "dashboard_address" in given:
        argv.append("--dashboard" if values.get("dashboard", True) else "--no-dashboard")
    for module in values.get("preload") or ():
        argv += ["--preload", module]
    return argv + list(preload_argv)


@click.command(context_settings=dict(ignore_unknown_options=True))
@click.argument("scheduler", type=str, required=False)
@click.argument("preload_argv", nargs=-1, type=click.UNPROCESSED)
@click.option("--host", default=None, help="Address the workers serve on (seen by the scheduler).")
@click.option("--worker-port", default=None, help="Port, or a range first:last across the GPUs.")
@click.option("--listen-address", default=None, help="Address the worker binds (tcp://0.0.0.0:9000).")
@click.option("--contact-address", default=None, help="Address the worker advertises.")
@click.option("--nthreads", type=int, default=1, show_default=True, help="Threads per worker.")
@click.option("--name", default=None, help="Name prefix of the workers.")
@click.option("--memory-limit", default="auto", show_default=True,
              help="Host memory per worker (auto: the host's memory shared by the GPU workers).")
@gpu_flags
@click.option("--pid-file", default="", help="File to write the process id to.")
@click.option("--resources", default="", help='Task resources, like "GPU=2 MEM=10e9".')
@click.option("--dashboard/--no-dashboard", default=True, show_default=True,
              help="A dashboard per worker (hpcgpu: only when this or --dashboard-address is given).")
@click.option("--dashboard-address", default=None,
              help="Where each worker's HTTP server (and dashboard) listens. Default: "
                   "127.0.0.1:0, this node only (dask-cuda: :0, every interface).")
@click.option("--local-directory", default=None, help="Directory for temporary and spilled files.")
@click.option("--scheduler-file", default=None, help="The scheduler's JSON file.")
@click.option("--protocol", default=None, help="tcp, tls, ucx or ucxx.")
@click.option("--interface", default=None, help="Network interface (eth0, ib0).")
@click.option("--preload", multiple=True, help="Module each worker process loads.")
@click.option("--death-timeout", default=None, help="Seconds to wait for the scheduler before closing.")
@click.option("--dashboard-prefix", default=None, help="Prefix of the dashboard's address.")
@click.option("--tls-ca-file", type=click.Path(exists=True, resolve_path=True), default=None)
@click.option("--tls-cert", type=click.Path(exists=True, resolve_path=True), default=None)
@click.option("--tls-key", type=click.Path(exists=True, resolve_path=True), default=None)
@click.option("--worker-class", default=None, help="Worker class inside each nanny.")
@click.option("--multiprocessing-method", default="spawn",
              type=click.Choice(["spawn", "fork", "forkserver", "forked-server"]),
              help="How nannies start workers (hpcgpu: forked-server, a fork server forked from "
                   "this process, unless given; with UCX, spawn or forkserver).")
@click.pass_context
def worker(ctx: click.Context, scheduler, preload_argv, **values) -> None:
    """Start one Dask worker per GPU of this host, attached to SCHEDULER (dask cuda worker's flags)."""
    from click.core import ParameterSource

    if isinstance(scheduler, str) and scheduler.startswith("-"):
        raise click.UsageError(f"the scheduler address can't start with '-': {scheduler!r} "
                               "looks like an option that this command does not take")
    if scheduler is None and values.get("scheduler_file") is None:  # as dask-cuda: dask's config
        import dask

        scheduler = dask.config.get("scheduler-address", None)
    given = {name for name in values if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE}
    try:
        options_from_flags(values)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    argv = entry_argv(scheduler, values, given, gpus_here(), tuple(preload_argv) + tuple(ctx.args))
    from hpcgpu.worker.__main__ import main as entry

    entry.main(args=argv, prog_name="hpcgpu worker")

