"""The command line of one GPU worker: ``python -m hpcgpu.worker <scheduler> [options]``.

Cluster mode, batch mode and ``hpcgpu jobscript`` all render it from this one value,
and :mod:`hpcgpu.worker` parses exactly these options. It starts the module as ``-m`` does
but without the working directory on ``sys.path`` (:mod:`hpcgpu.system.pymain`): a job
runs in the directory it was submitted from, often a shared one (#38).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.jobspec.scriptfields import check_fields, single_line
from hpcgpu.system.pymain import module_argv

__all__ = ["WorkerCommand", "split_resources"]


@dataclass(frozen=True)
class WorkerCommand:
    """Options of the worker entry point.

    Attributes
    ----------
    scheduler : str or None
        Scheduler address (``tls://host:port``); or give ``scheduler_file``.
    scheduler_file : str or None
        JSON file written by the scheduler, on a filesystem the nodes share.
    name : str or None
        Worker name prefix; each worker appends ``-<node>-<gpu>``. Default: the job id.
    nthreads : int
        Threads per worker.
    memory_limit : str
        Host memory limit per worker (Dask's ``--memory-limit``).
    protocol, interface : str or None
        Communication protocol (``tcp``, ``tls``, ``ucx``) and network interface.
    tls_ca_file, tls_cert, tls_key : str or None
        TLS files; required when the scheduler speaks ``tls://``.
    local_directory : str or None
        Scratch directory for spilled data.
    http_address : str or None
        Where each worker's HTTP server (``/health``, ``/metrics``) listens; None: the
        worker's default, ``127.0.0.1`` (:mod:`hpcgpu.worker.http`).
    death_timeout : int
        Seconds a worker waits for an unreachable scheduler before it exits.
    lifetime : int or None
        Seconds after which the worker retires gracefully (Dask's ``--lifetime``); by default
        the worker works it out from ``walltime``.
    walltime : int or None
        The job's walltime in seconds: the worker retires gracefully before its job ends
        (:mod:`hpcgpu.worker.walltime`).
    retire_before, lifetime_stagger : str or None
        When to retire before the end (``off`` never), and the spread (default: from the
        walltime, see :class:`hpcgpu.jobspec.walltime.Retirement`).
    gpus_per_node : int, "all" or None
        With one launcher task per node: the GPU workers (one nanny each) this task starts
        (``all``: one per GPU in its ``CUDA_VISIBLE_DEVICES``); None: the task is one GPU's (set by :meth:`hpcgpu.launchers.Launcher.worker`).
    launcher : str
        The launcher that started it (informative).
    rmm_pool_size : str or None
        RMM pool per GPU: ``auto`` (the worker's default: 90 % of the device), a size
        (``40GB``), a fraction (``0.9``) or ``none``.
    rmm_async : bool
        CUDA's stream-ordered allocator instead of an RMM pool.
    device_memory_limit : str or None
        Device memory held before spilling to host: ``auto`` (the default: 80 %), a size,
        a fraction or ``none``.
    cpu_affinity : bool
        Pin each worker to the CPU cores near its GPU (within the job's cpuset).
    gpu : GPUWorkerOptions or None
        All of dask-cuda's GPU options in one value
        (:class:`~hpcgpu.jobspec.gpuoptions.GPUWorkerOptions`), rendered as the entry point's
        flags; instead of the four fields above.
    extra : tuple of str
        More ``dask worker``-style arguments passed through.

    Examples
    --------
    >>> from hpcgpu.system.pymain import SAFE_MAIN  # python -m, without the cwd on sys.path
    >>> cmd = WorkerCommand(scheduler="tls://10.0.0.1:8786", name="job-3", nthreads=2,
    ...                     tls_ca_file="ca.pem", tls_cert="c.pem", tls_key="k.pem")
    >>> " ".join(cmd.argv("python3")).replace(SAFE_MAIN, "SAFE_MAIN")  # doctest: +NORMALIZE_WHITESPACE
    'python3 -c SAFE_MAIN hpcgpu.worker tls://10.0.0.1:8786 --name job-3 --nthreads 2 --memory-limit auto
     --death-timeout 120 --tls-ca-file ca.pem --tls-cert c.pem --tls-key k.pem'
    >>> WorkerCommand(scheduler="tcp://h:1", rmm_pool_size="0.8", device_memory_limit="40GB").argv("p")[-4:]
    ['--rmm-pool-size', '0.8', '--device-memory-limit', '40GB']
    >>> WorkerCommand(scheduler="tcp://h:1", rmm_pool_size="big")
    Traceback (most recent call last):
    ...
    ValueError: rmm_pool_size='big' is not a size: give bytes (40000000000), a size ('40GB'), a fraction of the device's memory (0.9), 'auto' or None
    >>> from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
    >>> WorkerCommand(scheduler="tcp://h:1", gpu=GPUWorkerOptions.from_dask_cuda(
    ...     rmm_async=True, rmm_release_threshold="3GB")).argv("p")[-5:]
    ['--rmm-pool-size', 'none', '--rmm-async', '--rmm-release-threshold', '3GB']
    """

    scheduler: str | None = None
    scheduler_file: str | None = None
    name: str | None = None
    nthreads: int = 1
    memory_limit: str = "auto"
    protocol: str | None = None
    interface: str | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    local_directory: str | None = None
    http_address: str | None = None
    death_timeout: int = 120
    lifetime: int | None = None
    walltime: int | None = None
    retire_before: str | None = None
    lifetime_stagger: str | None = None
    gpus_per_node: int | str | None = None
    launcher: str | None = None
    rmm_pool_size: str | None = None
    rmm_async: bool = False
    device_memory_limit: str | None = None
    cpu_affinity: bool = True
    gpu: GPUWorkerOptions | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if (self.scheduler is None) == (self.scheduler_file is None):
            raise ValueError("give exactly one of scheduler (an address) and scheduler_file")
        # Quoted where rendered; one line each (a newline would split the worker's argv
        # in logs and in the job's listing). ``extra`` is dask-jobqueue's worker_extra_args.
        check_fields(self, single_line)
        if self.nthreads < 1:
            raise ValueError(f"nthreads={self.nthreads!r} must be at least 1")
        given = {name: getattr(self, name) for name in ("rmm_pool_size", "rmm_async", "device_memory_limit")
                 if getattr(self, name) not in (None, False)}
        GPUWorkerOptions.from_dask_cuda(**given)  # validates the sizes (dask-cuda's forms)
        if self.gpu is not None and (given or not self.cpu_affinity):
            raise ValueError("give the GPU options either as gpu=GPUWorkerOptions(...) or as "
                             "rmm_pool_size/rmm_async/device_memory_limit/cpu_affinity, not both")

    def argv(self, python: str) -> list[str]:
        """The full argv, starting with the ``python`` executable: ``python -c SAFE_MAIN
        hpcgpu.worker ...`` (:func:`~hpcgpu.system.pymain.module_argv`), never ``-m``."""
        argv = [python, "-m", "hpcgpu.worker"]
        argv += [self.scheduler] if self.scheduler else ["--scheduler-file", self.scheduler_file]
        options = [
            ("--name", self.name),
            ("--nthreads", self.nthreads),
            ("--memory-limit", self.memory_limit),
            ("--death-timeout", self.death_timeout),
            ("--protocol", self.protocol),
            ("--interface", self.interface),
            ("--tls-ca-file", self.tls_ca_file),
            ("--tls-cert", self.tls_cert),
            ("--tls-key", self.tls_key),
            ("--local-directory", self.local_directory),
            ("--http-address", self.http_address),
            ("--lifetime", self.lifetime),
            ("--walltime", self.walltime),
            ("--retire-before", self.retire_before),
            ("--lifetime-stagger", self.lifetime_stagger),
            ("--launcher", self.launcher),
            ("--gpus-per-node", self.gpus_per_node),
            ("--rmm-pool-size", self.rmm_pool_size),
            ("--device-memory-limit", self.device_memory_limit),
        ]
        for flag, value in options:
            if value is not None:
                argv += [flag, str(value)]
        argv += ["--rmm-async"] if self.rmm_async else []
        argv += [] if self.cpu_affinity else ["--no-cpu-affinity"]
        if self.gpu is not None:
            from hpcgpu.jobspec.gpuflags import flag_argv  # click, only where rendered

            argv += flag_argv(self.gpu)
        return module_argv(argv + list(self.extra))


def split_resources(extra: tuple[str, ...] | list[str]) -> tuple[dict[str, float], tuple[str, ...]]:
    """The ``--resources`` of a worker's extra arguments (every one of them, in either
    spelling) and the other arguments.

    >>> split_resources(("--resources", "pool-big=1", "--lifetime", "1h"))
    ({'pool-big': 1.0}, ('--lifetime', '1h'))
    >>> split_resources(("--resources=A=2 B=1,C=3",))
    ({'A': 2.0, 'B': 1.0, 'C': 3.0}, ())
    """
    found, rest, args = {}, [], list(extra)
    while args:
        arg = args.pop(0)
        if arg == "--resources" and args:
            text = args.pop(0)
        elif arg.startswith("--resources="):
            text = arg.split("=", 1)[1]
        else:
            rest.append(arg)
            continue
        for item in text.replace(",", " ").split():
            name, _, value = item.partition("=")
            found[name] = float(value)
    return found, tuple(rest)
