"""Batch mode: scheduler, one worker per GPU and the user's script inside one allocation.

:func:`run_batch` is what ``hpcgpu run`` does, once, in the batch script's shell:

1. read the allocation (:mod:`hpcgpu.runner.allocation`);
2. make a job-private directory (0700) with a temporary TLS certificate, in a directory no
   other user can change (:mod:`hpcgpu.runner.jobdir`);
3. start the Dask scheduler as an extra process on this (the first) node, with no GPU; it
   says where it listens over a pipe (:mod:`hpcgpu.runner.address_pipe`);
4. start one worker per GPU through the launcher (srun, mpirun, mpiexec, jsrun, direct);
5. wait for ``min_workers``, then run the script with ``DASK_SCHEDULER_ADDRESS`` set;
6. shut the workers and the scheduler down, remove the directory, return the script's code.

SIGTERM, SIGINT, SIGUSR1, SIGUSR2 and SIGHUP (what batch systems send at walltime or on
cancel) are forwarded to the script; the cluster is then stopped the same way, and the
exit code is ``128 + signal``. After SIGTERM the batch system kills whatever is left a few
seconds later (SLURM's KillWait), and it has signalled every process of the job already:
the job directory goes first, and the shutdown ends within
:data:`~hpcgpu.runner.signals.SIGTERM_BUDGET`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass

import dask

from hpcgpu.system.closelog import quiet_expected_close
from hpcgpu.launchers import get_launcher
from hpcgpu.network import NetworkSettings, config_context, job_environment, worker_options
from hpcgpu.network.routed import scheduler_host
from hpcgpu.network.ucxauth import key_for
from hpcgpu.runner.allocation import Allocation, detect_allocation
from hpcgpu.runner.dashboard import dashboard_message
from hpcgpu.runner.launch import launcher_environment, started_per_task, workers_argv
from hpcgpu.runner.lifeline import SCHEDULER_LOST
from hpcgpu.runner.options import BatchOptions, network
from hpcgpu.runner.processes import Child, start_child
from hpcgpu.runner.scheduler import SchedulerOptions, start_scheduler
from hpcgpu.runner.jobdir import JobDirectory, open_job_directory
from hpcgpu.runner.security import TLSFiles, check_in_environment, temporary_tls, write_tls
from hpcgpu.runner.signals import STOP_SIGNALS, Stop
from hpcgpu.system.threadsignals import born_blocked
from hpcgpu.system.versions import local_versions, worker_mismatches
from hpcgpu.worker.nannies import stop_through_nannies
from hpcgpu.worker.startfailure import start_error
from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = ["BatchOptions", "run_batch", "STOP_SIGNALS", "script_argv", "network"]

#: Exit code when the cluster could not be started (the script never ran).
SETUP_FAILED = 1
#: Seconds between progress lines while the worker count does not change.
PROGRESS_INTERVAL = 30.0
#: lines of the launcher's output kept to say why it ended before its workers connected
WORKER_TAIL_LINES = 400


def script_argv(python: str, script: str, args: tuple[str, ...]) -> list[str]:
    """``python script.py args`` for a ``.py`` file, the command itself otherwise.

    Examples
    --------
    >>> script_argv("py", "a.py", ("1",)), script_argv("py", "./run.sh", ())
    (['py', 'a.py', '1'], ['./run.sh'])
    """
    return [python, script, *args] if script.endswith(".py") else [script, *args]


def _say(message: str) -> None:
    print(f"hpcgpu run: {message}", file=sys.stderr, flush=True)


def _role_env(s: "_Session", role: str) -> dict[str, str]:
    """This environment plus the role's UCX settings (``DASK_DISTRIBUTED_UCXX__*``, ``UCX_*``),
    and with ``--no-key-files`` the certificate itself (:class:`TLSFiles` of PEM texts)."""
    in_memory = s.own_tls.environment() if s.own_tls is not None and s.tls is None else {}
    return {**os.environ, **dict(job_environment(s.network, role)), **in_memory}


@dataclass
class _Session:
    options: BatchOptions
    allocation: Allocation
    directory: JobDirectory
    stop: Stop
    network: NetworkSettings
    tls: TLSFiles | None = None
    #: the same certificate in memory: this process's client trusts no file
    own_tls: TLSFiles | None = None
    scheduler: Child | None = None
    workers: Child | None = None
    address: str | None = None

    @property
    def expected(self) -> int:
        return self.options.min_workers or self.allocation.total_gpus


def _start_cluster(s: _Session) -> None:
    o, net = s.options, s.network
    if net.protocol == "tls" and o.key_files:
        s.tls, s.own_tls = write_tls(s.directory.held)
    elif net.protocol == "tls":  # --no-key-files: PEM text in every role's environment
        s.own_tls = temporary_tls()
    host = None if net.scheduler_interface else scheduler_host(s.allocation.hosts)
    sched_options = SchedulerOptions(net.protocol, net.scheduler_interface, o.dashboard_address, host)
    s.scheduler, info = start_scheduler(o.python, sched_options, s.tls, _role_env(s, "scheduler"))
    s.address = info["address"]
    # for the script (HPCGPU_SCHEDULER_FILE); written by this process, read by none of hpcgpu's
    s.directory.write_private("scheduler.json", json.dumps(info))
    dashboard = info.get("services", {}).get("dashboard") if o.dashboard_address else None
    _say(f"scheduler {s.address} (pid {s.scheduler.pid})")
    if dashboard:
        _say(dashboard_message(o.dashboard_address, dashboard))
    worker = WorkerCommand(
        scheduler=s.address, nthreads=o.nthreads, memory_limit=o.memory_limit,
        death_timeout=60, extra=o.worker_args, **worker_options(net),
        **(s.tls.worker_args() if s.tls else {}),
    )
    launcher = get_launcher(o.launcher or s.allocation.default_launcher)
    python = o.container_python if o.container else o.python
    argv = workers_argv(s.allocation, launcher, worker, python, o.launcher_args, o.container)
    env = launcher_environment(s.allocation, launcher, _role_env(s, "worker"))
    s.workers = start_child("workers", argv, env=env, keep_tail=WORKER_TAIL_LINES)
    _say(f"{s.allocation.total_gpus} worker(s), {s.allocation.layout}, through "
         f"{launcher.name} (pid {s.workers.pid})")


def _wait_for_workers(s: _Session, client) -> bool:
    """Poll until enough workers are there; False if stopped, raise if it cannot happen."""
    started = time.monotonic()
    deadline = started + s.options.timeout
    seen, said = -1, started
    while not s.stop.check(s.scheduler, "the workers were awaited"):
        count = len(client.nthreads())
        now = time.monotonic()
        if count != seen or now - said >= PROGRESS_INTERVAL:  # a log shows what is awaited
            _say(f"{count}/{s.expected} worker(s) connected after {now - started:.0f} s"
                 + ("" if count != seen else f"; {s.workers.name} (pid {s.workers.pid}) "
                    "still starting them"))
            seen, said = count, now
        if count >= s.expected:  # an image's hpcgpu, dask or distributed may differ from ours
            for message in worker_mismatches(local_versions(), client.scheduler_info()["workers"]).values():
                _say(message)
            return True
        if not s.workers.running():
            said = s.workers.output_tail()
            hint = get_launcher(s.options.launcher or s.allocation.default_launcher).failure_hint(said)
            raise RuntimeError(f"the launcher exited with code {s.workers.popen.returncode} "
                               f"after {count} of {s.expected} worker(s) connected; the "
                               f"workers said:\n{start_error(said)}" + (f"\n{hint}" if hint else ""))
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {count} of {s.expected} worker(s) connected within "
                               f"{s.options.timeout:g} s: see the workers' messages above, or "
                               "lower --min-workers / raise --timeout")
        time.sleep(0.2)
    return False


def _run_script(s: _Session) -> int:
    o = s.options
    env = {**_role_env(s, "client"), "DASK_SCHEDULER_ADDRESS": s.address,
           "HPCGPU_SCHEDULER_FILE": str(s.directory.path / "scheduler.json"),
           "HPCGPU_N_WORKERS": str(s.allocation.total_gpus)}
    if s.tls is not None:
        env.update(s.tls.environment())
    if s.network.protocol == "ucx+auth":  # the script's own Client, where no entry point names it
        env["DASK_DISTRIBUTED__CLIENT__PRELOAD"] = repr(
            [*dask.config.get("distributed.client.preload", []), "hpcgpu.network.schemes"])
    # Its own process group: a forwarded signal reaches whatever the script started too.
    s.stop.script = start_child("script", script_argv(o.python, o.script, o.args), env=env)
    code = None
    while code is None:
        code = s.stop.script.wait(0.2)
        if code is None and s.stop.check(s.scheduler, "the script ran"):
            # The handler forwarded the signal already, unless it came just before the start.
            first = 0 if s.stop.forwarded else s.stop.signum or signal.SIGTERM
            code = s.stop.script.stop(grace=s.stop.left(o.grace), first=first)
    _say(f"{o.script} exited with code {code}")
    return 128 - code if code < 0 else code


async def _stop_workers(client, grace: float) -> None:
    """Workers down through their nannies while the scheduler still runs (no heartbeat into
    a closed scheduler: :func:`~hpcgpu.worker.nannies.stop_through_nannies`); one coroutine,
    so that one timeout bounds it all."""
    identity = await client.scheduler.identity(n_workers=-1)
    nannies = [w["nanny"] for w in identity["workers"].values() if w.get("nanny")]
    await stop_through_nannies(nannies, client.security.get_connection_args("client"))
    deadline = time.monotonic() + grace
    while (await client.scheduler.identity(n_workers=-1))["workers"] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def _while_running(child: Child, coroutine) -> None:
    """Await ``coroutine`` unless ``child`` exits first (then nothing answers it any more:
    a scheduler that the batch system signalled too closes by itself)."""
    task = asyncio.ensure_future(coroutine)
    while not task.done() and child.running():
        await asyncio.wait([task], timeout=0.1)
    if not task.done():
        task.cancel()
        return
    task.result()


def _close_client(client, s: _Session) -> None:
    """The workers stopped, then the client closed while its scheduler still runs: a client
    whose scheduler closes under it reconnects, and a connection to a scheduler half closed
    failed with ``ValueError: IOStream is not idle`` (tracebacks in the job's log)."""
    try:
        if s.scheduler is not None and s.scheduler.running():
            client.sync(_while_running, s.scheduler, _stop_workers(client, s.stop.left(s.options.grace)),
                        callback_timeout=s.stop.left(2 * s.options.grace))
    except Exception as exc:  # already gone: the launcher and scheduler are stopped below
        _say(f"workers' shutdown: {exc!r}")
    try:
        client.close(timeout=s.stop.left(s.options.grace))
    except Exception:  # a client of a scheduler that is gone: nothing more to close
        pass


def _shutdown(s: _Session, client) -> None:
    stop, grace = s.stop, s.options.grace
    if stop.signum is not None and not s.options.keep_work_dir:
        s.directory.remove()  # first: a SIGKILL may cut the rest short
    if client is not None:
        _close_client(client, s)
    if s.workers is not None and not s.workers.wait_group(stop.left(grace)):
        _say(f"stopping the {s.workers.name} (pid {s.workers.pid}) with SIGTERM")
        s.workers.stop(grace=stop.left(grace))
    if s.scheduler is not None:  # its client is closed: SIGTERM is its normal end
        s.scheduler.stop(grace=stop.left(grace))
    if not s.options.keep_work_dir:
        s.directory.remove()


def run_batch(options: BatchOptions) -> int:
    """Run ``options.script`` on a Dask cluster of this allocation; return its exit code."""
    mistake = started_per_task()
    if mistake:
        raise ValueError(mistake)
    allocation = detect_allocation(nodes=options.nodes, gpus_per_node=options.gpus_per_node)
    launcher = get_launcher(options.launcher or allocation.default_launcher)
    launcher.validate(allocation.shape())
    if options.tls and not options.key_files:
        check_in_environment(launcher.name, dict(os.environ))
    launcher_environment(allocation, launcher, {})  # a layout it cannot start fails here
    net = network(options)  # before anything starts: UCX missing fails here
    if options.min_workers is not None and not 1 <= options.min_workers <= allocation.total_gpus:
        raise ValueError(f"min_workers={options.min_workers} must be between 1 and the "
                         f"allocation's {allocation.total_gpus} GPU(s)")
    directory = open_job_directory(options.work_dir, allocation.scheduler, allocation.job_id)
    quiet_expected_close()  # this process's client, when the scheduler went first
    # ucx+auth: a key in the job's 0700 directory, its path in every role's environment
    with Stop() as stop, key_for(net.protocol, directory.path):
        session = _Session(options, allocation, directory, stop, net)
        client = None
        try:
            _start_cluster(session)
            from distributed import Client

            from hpcgpu.network.schemes import register as register_schemes

            register_schemes()  # this process's client: ucx+auth:// without entry points
            security = session.own_tls.security() if session.own_tls else None
            with config_context(net, "client"), born_blocked():  # its loop's thread too
                client = Client(session.address, security=security, timeout="60s")
            if _wait_for_workers(session, client) and stop.signum is None:
                code = _run_script(session)
            else:
                code = SETUP_FAILED
        except (RuntimeError, TimeoutError, OSError, ImportError) as exc:
            _say(f"error: {exc}")
            code = SETUP_FAILED
        finally:
            _shutdown(session, client)
            directory.close()
    if stop.signum is not None:
        _say(f"stopped by {signal.Signals(stop.signum).name}: exit status {128 + stop.signum}")
        return 128 + stop.signum
    if stop.lost is not None:  # whatever the script returned: it was stopped
        _say(f"scheduler lost: exit status {SCHEDULER_LOST}")
        return SCHEDULER_LOST
    return code
