"""``hpcgpu doctor --job``: the same preflight, as a tiny 1-node 1-GPU job on a compute node.

The login node opens a TCP listener on the scheduler's interface while the job runs, so
the compute node can tell whether the address a scheduler would have is reachable.
The job script is rendered with :mod:`hpcgpu.jobspec.render` (the one template) and submitted
through :mod:`hpcgpu.system.commands`, with the environment a worker job would export.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from hpcgpu.system import commands
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.launchers import get_launcher
from hpcgpu.network import NetworkSettings, job_environment
from hpcgpu.system.pymain import module_argv
from hpcgpu.system.safedir import check_private_path
from hpcgpu.system.threadsignals import start_thread
from hpcgpu.jobspec.render import JobScript, render
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["settings_argv", "doctor_job_script", "listener", "run_doctor_job", "DoctorJobError",
           "DoctorJobTimeout"]


def settings_argv(settings: NetworkSettings) -> list[str]:
    """The ``hpcgpu doctor`` options that rebuild ``settings`` on the other side.

    Examples
    --------
    >>> settings_argv(NetworkSettings.create("ucx", transports="ib", interface="ib0"))
    ['--protocol', 'ucx', '--transports', 'infiniband', '--scheduler-interface', 'ib0', '--worker-interface', 'ib0']
    """
    argv = ["--protocol", settings.protocol]
    options = [
        ("--transports", ",".join(settings.transports) if settings.transports else None),
        ("--scheduler-interface", settings.scheduler_interface),
        ("--worker-interface", settings.worker_interface),
        ("--net-devices", settings.net_devices),
        ("--client-protocol", settings.client_protocol),
        ("--fallback", settings.fallback),
    ]
    for flag, value in options:
        if value:
            argv += [flag, value]
    return argv


def doctor_job_script(settings: NetworkSettings, output: str, scheduler: str = "slurm", *,
                      scheduler_address: str | None = None, python: str = sys.executable,
                      log_directory: str = ".", queue: str | None = None, account: str | None = None,
                      walltime: str = "00:05:00", site: dict | None = None) -> str:
    """The text of a 1-node, 1-GPU job that runs ``hpcgpu doctor --local --json``."""
    dialect = get_dialect(scheduler, **(site or {}))
    shape = GPUJobShape.create(nodes=1, gpus_per_node=1, walltime=walltime, queue=queue,
                               account=account, job_name="hpcgpu-doctor")
    argv = [python, "-m", "hpcgpu", "doctor", "--local", "--json", "--role", "compute",
            "--output", output, *settings_argv(settings)]
    if scheduler_address:
        argv += ["--scheduler-address", scheduler_address]
    script = JobScript(shape, dialect, get_launcher(dialect.default_launcher), shlex.join(module_argv(argv)),
                       launch=False, log_directory=log_directory,
                       environment=job_environment(settings, "worker"),
                       header=("hpcgpu doctor: preflight on a compute node",))
    return render(script)


def _interface_ip(interface: str | None) -> str:
    if interface is None:
        from distributed.utils import get_ip

        return get_ip()
    from distributed.utils import get_ip_interface

    return get_ip_interface(interface)


@contextmanager
def listener(interface: str | None):
    """A TCP listener on ``interface`` (port 0) that accepts and closes; yields ``tcp://ip:port``."""
    ip = _interface_ip(interface)
    server = socket.create_server((ip, 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = start_thread(threading.Thread(target=serve, daemon=True, name="hpcgpu-doctor-listener"))
    try:
        yield f"tcp://{ip}:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        server.close()


class DoctorJobError(RuntimeError):
    """The doctor job gave no report: it ended without one, or none came in time."""


class DoctorJobTimeout(DoctorJobError, TimeoutError):
    """No report in the time given (the job was cancelled)."""


def run_doctor_job(settings: NetworkSettings, scheduler: str = "slurm", *, timeout: float = 300,
                   directory: str | None = None, **script_options) -> dict:
    """Submit the doctor job, wait for its report and return it (facts and checks).

    ``directory`` must be on a filesystem the compute node shares (default: a new
    directory under the current one, removed once the report is back). Raises
    ``ValueError`` where another user could replace that directory (nothing submitted),
    :class:`DoctorJobError` with the job's own output as soon as the job has ended without
    a report (a Python that cannot start, a node that kills it), and
    :class:`DoctorJobTimeout` (after cancelling the job) when none came in ``timeout`` s.
    """
    keep = directory is not None
    # the job script is submitted by path: no other user may be able to swap its directory
    check_private_path(directory or os.getcwd(), "hpcgpu doctor --job's directory",
                       "run it from a directory only you can write (cd ~)")
    work = Path(directory or tempfile.mkdtemp(prefix=".hpcgpu-doctor-", dir=os.getcwd()))
    work.mkdir(parents=True, exist_ok=True)
    output = work / "report.json"
    dialect = get_dialect(scheduler, **(script_options.get("site") or {}))
    with listener(settings.scheduler_interface) as address:
        text = doctor_job_script(settings, str(output), scheduler, scheduler_address=address,
                                 log_directory=str(work), **script_options)
        path = work / "doctor.sh"
        path.write_text(text)
        job_id = dialect.parse_job_id(commands.run(dialect.submit_argv(str(path))).stdout)
        _wait_for_report(dialect, job_id, output, work, timeout)
    report = json.loads(output.read_text())
    report["job_id"] = job_id
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return report


def _wait_for_report(dialect, job_id: str, output: Path, work: Path, timeout: float) -> None:
    """Until ``output`` exists; the job's state is asked every 2 s, so that a job that ended
    without a report is reported at once, not after ``timeout``."""
    started = time.monotonic()
    deadline, next_poll, ended_at = started + timeout, started + 2, None
    while not output.exists():
        now = time.monotonic()
        if ended_at is not None and now - ended_at > 3:  # a report written as it ended lands
            raise DoctorJobError(f"doctor job {job_id} ended without a report; its output:\n"
                                 f"{_job_output(dialect, job_id, work) or '(none)'}")
        if now > deadline:
            commands.run(dialect.cancel_argv([job_id]), check=False)
            raise DoctorJobTimeout(f"doctor job {job_id} gave no report in {timeout:g} s (cancelled); its "
                                   f"output:\n{_job_output(dialect, job_id, work) or '(none yet: still queued?)'}")
        if ended_at is None and now >= next_poll:
            next_poll = now + 2
            if _job_ended(dialect, job_id, listed_since=now - started):
                ended_at = now
        time.sleep(0.25)


def _job_ended(dialect, job_id: str, listed_since: float) -> bool:
    """Whether the scheduler says the job ended (or no longer lists it, some seconds after
    its submission); a failed status call says nothing."""
    from hpcgpu.cluster.batch.faults import status_failed

    result = commands.run(dialect.status_argv([job_id]), timeout=30, check=False)
    if status_failed(result):
        return False
    status = dialect.parse_status(result.stdout).get(job_id)
    return status.finished if status is not None else listed_since > 4


def _job_output(dialect, job_id: str, work: Path) -> str:
    """The doctor job's error log where the dialect puts it (``<name>.o<id>`` on PBS and
    SGE), then any other ``*.out`` in ``work``; the last 2,000 characters of each."""
    error_log = Path(dialect.error_log("hpcgpu-doctor", job_id, str(work)))
    paths = [error_log] + [p for p in sorted(work.glob("*.out")) if p != error_log]
    return "\n".join(p.read_text()[-2000:] for p in paths if p.exists())
