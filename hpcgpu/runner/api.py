"""``GPURunner``: a script launched on every rank (``srun python app.py``) becomes a cluster.

Built on dask-jobqueue's :class:`~dask_jobqueue.runner.BaseRunner` (roles, the event loop,
the context manager). Unlike its ``SLURMRunner``, no rank is spent on the scheduler or the
client: rank 0 runs the client code, the scheduler (in its event-loop thread) *and* a worker
on its own GPU (see :mod:`hpcgpu.runner.ranks`); every other rank runs one worker on its
GPU and exits, with rank 0's exit code, when rank 0 leaves the ``with`` block.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import stat
import sys
import threading
from pathlib import Path

import dask
from distributed import Client, Scheduler
from distributed.core import Status
from distributed.security import Security

from hpcgpu.network.colocate import CoLocateRoots
from hpcgpu.system.jobqueue import BaseRunner, Role  # without dask_jobqueue's SIGINT handler
from hpcgpu.system.closelog import quiet_expected_close
from hpcgpu.runner import ranks
from hpcgpu.runner.dashboard import DEFAULT_DASHBOARD, scheduler_dashboard_message
from hpcgpu.runner.security import TLSFiles, make_private_directory, write_private, write_tls_files
from hpcgpu.system.safedir import check_private_path
from hpcgpu.system.schedfile import read_trusted_json
from hpcgpu.system.threadsignals import block_here, born_blocked
from hpcgpu.worker.nannies import close_workers_then_scheduler
from hpcgpu.worker.placement import job_id_from_env, shared_gpu_workers
from hpcgpu.jobspec.gpukeywords import GPU_KEYWORDS, batch_gpu_options
from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.jobspec.keywords import as_count, check_keywords
from hpcgpu.jobspec.worker_command import WorkerCommand



__all__ = ["GPURunner", "SLURMRunner"]

_DEFAULT_FILE = "hpcgpu-scheduler-{job_id}.json"


class GPURunner(BaseRunner):
    """Turn the ranks of a launched script into a Dask cluster with one worker per GPU.

    Parameters
    ----------
    scheduler_file : str
        Where rank 0 writes the scheduler's address, on a filesystem every node sees;
        ``{job_id}`` is replaced by the batch job id. The TLS files go into a 0700 directory
        next to it (``<scheduler_file>.tls``), removed at the end. Its directory must be one
        where no other user can replace anything (:mod:`hpcgpu.system.safedir`; a sticky
        one such as ``/tmp`` is fine), else every rank refuses to start; the other ranks take
        only a file of the user's, mode 0600, written after this run started.
    security : bool or distributed.security.Security
        ``True`` (default): a temporary job-private certificate; ``False``: plain TCP.
    nthreads, memory_limit : int, str
        Per worker.
    scheduler_options, worker_options : dict
        More keyword arguments of :class:`distributed.Scheduler` / :class:`distributed.Worker`.
        As with dask-jobqueue's ``SLURMRunner``, ``scheduler_options`` may carry the
        ``scheduler_file`` (``hpcgpu.SLURMRunner`` is this class: docs/migrating.md).
    **gpu_options
        ``LocalCUDACluster``'s worker keywords (``rmm_pool_size``, ``device_memory_limit``,
        ``pre_import``...: :data:`hpcgpu.jobspec.gpukeywords.GPU_KEYWORDS`), with
        dask-cuda's meanings, checked on every rank before anything starts. The ``enable_*``
        UCX switches set this process's ``distributed-ucxx`` config (give
        ``scheduler_options={"protocol": "ucx"}`` for UCX).

    Examples
    --------
    >>> import hpcgpu
    >>> with hpcgpu.GPURunner() as runner:  # doctest: +SKIP
    ...     client = runner.get_client()      # rank 0 only; the other ranks serve as workers
    ...     print(client.submit(sum, [1, 2], resources={"GPU": 1}).result())
    3
    """

    def __init__(self, scheduler_file: str | None = _DEFAULT_FILE, *,
                 security: bool | Security = True, nthreads: int = 1, memory_limit: str = "auto",
                 scheduler_options: dict | None = None, worker_options: dict | None = None,
                 asynchronous: bool = False, loop=None, **gpu_options) -> None:
        # Every keyword's type first: a string is not True, nothing starts on bad input.
        check_keywords({k: v for k, v in locals().items() if k not in ("self", "__class__")})
        check_keywords(gpu_options)
        # dask_jobqueue.slurm.SLURMRunner's forms: the file may come in scheduler_options
        # (used unless an argument names another), and worker_options may repeat it.
        scheduler_options, worker_options = dict(scheduler_options or {}), dict(worker_options or {})
        in_options = scheduler_options.pop("scheduler_file", None)
        worker_options.pop("scheduler_file", None)
        if in_options and scheduler_file in (None, _DEFAULT_FILE):
            scheduler_file = str(in_options)
        scheduler_file = scheduler_file or _DEFAULT_FILE
        self.gpu_options = _runner_gpu_options(gpu_options)
        self.rank, self.world_size = ranks.rank_and_size()
        #: Dask workers of the run, as SLURMRunner's ``n_workers``: one on every rank.
        self.n_workers = self.world_size
        job_id = job_id_from_env(default="local")
        self.scheduler_file = Path(scheduler_file.format(job_id=job_id)).resolve()
        self.tls_directory = self.scheduler_file.with_name(self.scheduler_file.name + ".tls")
        self._security_option = security
        self.security: Security | None = security if isinstance(security, Security) else None
        self.nthreads, self.memory_limit = as_count("nthreads", nthreads), memory_limit
        self._own_worker = None
        self._previous_sigterm = None
        self._scheduler = None
        self._place = None
        # every rank's worker is the GPU worker rank 0 starts (RMM pool, spilling, affinity)
        super().__init__(scheduler=True, scheduler_options=scheduler_options,
                         worker_options=worker_options, client=True,
                         asynchronous=asynchronous, loop=loop, worker_class=ranks.GPU_WORKER)
        if self.role == Role.worker and not asynchronous:
            code = ranks.RECORDED_EXIT_CODE[0] if ranks.RECORDED_EXIT_CODE else 1
            self._loop_runner.stop()
            sys.exit(code)
        self._previous_sigterm = _sigterm_as_exit() if self.role == Role.client else None

    async def get_role(self):
        return Role.client if self.rank == 0 else Role.worker

    async def get_worker_name(self) -> str:
        return self._place.name

    async def get_scheduler_address(self) -> str:
        """Wait for this run's scheduler file (not a stale one) and return its address."""
        import asyncio

        import psutil

        started = psutil.Process().create_time() - 120  # the ranks start about together
        while True:
            found = read_trusted_json(self.scheduler_file, "scheduler_file", private=True,
                                      not_before=started)
            if found and found.get("address"):
                return found["address"]
            await asyncio.sleep(0.2)

    async def _start(self) -> None:
        block_here()  # the loop's thread, and the threads it starts: stop signals to the main one
        self.role = await self.get_role()
        if self.role == Role.worker:
            address = await self.get_scheduler_address()
            if self.security is None and self._security_option and _own_private(self.tls_directory):
                self.security = TLSFiles.in_directory(self.tls_directory).security()
            self._place = ranks.pin_gpu()
            self.worker_options.update(ranks.worker_options(
                self._place, self.nthreads, self.memory_limit, security=self.security,
                scheduler_ip=address))
            self.worker_options.pop("name")
            await self.start_worker()
        else:
            await self._start_rank0()
        self.status = Status.running

    async def _start_rank0(self) -> None:
        check_private_path(self.scheduler_file.parent, "scheduler_file")
        self.scheduler_file.unlink(missing_ok=True)  # a stale one would mislead the workers
        atexit.register(self.scheduler_file.unlink, missing_ok=True)
        tls = None
        if self._security_option is True:
            shutil.rmtree(self.tls_directory, ignore_errors=True)
            # removed at exit however the script ends (the `with` block's end removes it first)
            atexit.register(shutil.rmtree, self.tls_directory, ignore_errors=True)
            tls = write_tls_files(make_private_directory(self.tls_directory))
            self.security = tls.security()
        options = dict(port=0, dashboard_address=DEFAULT_DASHBOARD, protocol="tls" if self.security else None,
                       plugins=[CoLocateRoots()])
        options.update(self.scheduler_options)
        # The TLS files exist before the scheduler file appears: workers read both.
        quiet_expected_close()
        self._scheduler = await Scheduler(security=self.security, **options)
        self.scheduler_address = self._scheduler.address
        # written here, new, 0600: the other ranks take no other (not distributed's, umask's mode)
        write_private(self.scheduler_file, json.dumps(self._scheduler.identity()))
        message = scheduler_dashboard_message(self._scheduler, options.get("dashboard_address")
                                              if options.get("dashboard", True) else None)
        if message:
            print(f"hpcgpu GPURunner: {message}", file=sys.stderr, flush=True)
        # hpcgpu.get_client() and distributed.Client() in the client code find it all.
        dask.config.set({"scheduler-address": self.scheduler_address})
        if tls is not None:
            dask.config.set(tls.client_config())
        command = WorkerCommand(
            scheduler=self.scheduler_address, nthreads=self.nthreads,
            memory_limit=self.memory_limit, death_timeout=60, gpu=self.gpu_options,
            **(tls.worker_args() if tls else {}),
        )
        self._own_worker = ranks.start_own_worker(command)

    def get_client(self, wait: bool = True, timeout: float = 120) -> Client:
        """A client of this cluster (rank 0), after every rank's worker joined if ``wait``."""
        with born_blocked():  # its loop's thread: stop signals to the main one
            client = Client(self.scheduler_address, security=self.security)
        if wait:
            client.wait_for_workers(self.world_size, timeout=timeout)
            # The ranks started without talking to each other: compare their GPUs now.
            error = shared_gpu_workers(client.run_on_scheduler(_placements))
            if error:
                client.close()
                raise ValueError(error)
        return client

    async def _close_cluster(self, code: int) -> None:
        try:
            async with Client(self.scheduler_address, security=self.security,
                              asynchronous=True, timeout=10) as client:
                await client.run(ranks.record_exit_code, code)
        except Exception:  # nobody to tell: the workers then exit with code 1
            pass
        await close_workers_then_scheduler(self._scheduler, f"hpcgpu GPURunner ended with code {code}")

    def __exit__(self, typ, value, traceback):
        if self.role != Role.client or self._scheduler is None:
            return None
        ranks.close_clients_of(self.scheduler_address)
        self.sync(self._close_cluster, ranks.exit_code_of(value))
        if self._own_worker is not None and not self._own_worker.wait_group(10):
            self._own_worker.stop(grace=5)
        shutil.rmtree(self.tls_directory, ignore_errors=True)
        self.scheduler_file.unlink(missing_ok=True)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        self.status = Status.closed
        self._loop_runner.stop()
        return None  # the exception, if any, propagates: the script's own exit code


def _own_private(directory: Path) -> bool:
    """Whether ``directory`` is there; ``ValueError`` if it is not this user's with mode 0700."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
        raise ValueError(f"scheduler_file: {directory} is not your directory with mode 0700: "
                         "remove it (rank 0 makes it)")
    return True


def _runner_gpu_options(given: dict) -> GPUWorkerOptions | None:
    """The workers' options from dask-cuda's keywords (None: none given); the in-process
    workers of the other ranks read them from the environment, as every GPU worker."""
    unknown = sorted(set(given) - set(GPU_KEYWORDS))
    if unknown:
        raise TypeError(f"GPURunner() got unexpected keyword argument(s) {', '.join(unknown)}: "
                        f"it takes dask-cuda's worker keywords {', '.join(GPU_KEYWORDS)}")
    worker, options = batch_gpu_options(given)
    if worker is None and not options.ucx_transports_given:
        return None  # nothing given: the workers' defaults, the environment untouched
    if options.ucx_config():  # every role of a rank runs in this process (or its child)
        dask.config.set(options.ucx_config())
    os.environ.update(options.to_env())
    return options


def _sigterm_as_exit():
    """On rank 0, make SIGTERM (a cancel, the walltime) end the client code with
    ``SystemExit(143)``, so that leaving the ``with`` block closes the cluster and removes
    the key files; by default SIGTERM ends the process at once. Returns the handler to
    restore, or None where another one is set (the user's) or this is not the main thread."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return None

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def _placements(dask_scheduler) -> dict:
    """Run on the scheduler: worker name -> what its preload recorded."""
    return {str(ws.name): ws.extra.get("hpcgpu") for ws in dask_scheduler.workers.values()}


#: ``from hpcgpu import SLURMRunner`` for scripts written for ``dask_jobqueue.slurm.SLURMRunner``.
SLURMRunner = GPURunner
