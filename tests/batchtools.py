"""Helpers for the batch-mode tests: find processes by an environment marker, wait for jobs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hpcgpu.runner.scheduler import SCHEDULER_NAME

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "examples" / "check_gpu_workers.py"
OMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def job_output(directory: Path, pattern: str) -> str:
    """The whole text of a job's output files (``pattern`` in ``directory``, in name order):
    whole, because a loaded machine logs more and a tail may miss the line a test looks for."""
    return "".join(p.read_text() for p in sorted(directory.glob(pattern)) if p.exists())


def process_name(pid: int) -> str:
    """``/proc/PID/comm`` ("" once gone): ``dask-scheduler`` for ``hpcgpu run``'s scheduler,
    a fork of it that keeps its command line."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def batch_scheduler(marker: str) -> list[int]:
    """The pids of the Dask schedulers among :func:`processes_with` ``marker``'s."""
    return [pid for pid, cmd in processes_with(marker)
            if process_name(pid) == SCHEDULER_NAME or "dask_scheduler" in cmd]


def hpcgpu_run(marker: str) -> list[int]:
    """The pids of ``hpcgpu run`` (not its forked scheduler) among ``marker``'s processes."""
    return [pid for pid, cmd in processes_with(marker)
            if "-m hpcgpu run " in cmd and process_name(pid) != SCHEDULER_NAME]


def processes_with(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment holds ``marker``
    (``NAME=value``), this test process excepted."""
    needle = marker.encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ and not environ.endswith(needle[:-1]):
                continue
            if (entry / "stat").read_text().split(")")[-1].split()[0] == "Z":
                continue  # a zombie has exited: only its parent's wait is pending
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        found.append((int(entry.name), cmdline))
    return found


def slurm_state(job_id: str) -> tuple[str, str]:
    """(JobState, ExitCode) from scontrol; ('', '') when the job is unknown."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    fields = dict(word.split("=", 1) for word in out.split() if "=" in word)
    return fields.get("JobState", ""), fields.get("ExitCode", "")


def slurm_finished(job_id: str) -> tuple[str, str] | None:
    """(JobState, ExitCode) once the job has ended, else None. A job slurmctld no longer
    knows (ended more than ``MinJobAge`` ago: its record is purged, and no accounting
    keeps it here) fails at once: waiting could not see it end."""
    state = slurm_state(job_id)
    assert state[0], (f"job {job_id} is no longer known to slurmctld: it ended over MinJobAge "
                      "(tests/schedulers/slurm/start) before this check")
    return state if state[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") else None


def sbatch_wrap(directory: Path, options: list[str], command: str, name: str = "hpcgpu-batch-test") -> str:
    """Submit ``command`` as the batch script of a job with ``options``; its job id.

    The job runs in ``directory`` and writes ``<job id>.out`` there; it gets this process's
    environment (PYTHONPATH, the Open MPI root permission).
    """
    argv = ["sbatch", "--parsable", "--mem=1G", "--time=10", f"--job-name={name}",
            f"--chdir={directory}", f"--output={directory}/%j.out",
            "--export=ALL," + ",".join(f"{k}={v}" for k, v in OMPI_ROOT.items()),
            *options, "--wrap", command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]

