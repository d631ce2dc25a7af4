"""The job directory of ``hpcgpu run``: where it goes, how it is checked, held and pruned.

It used to be ``./.hpcgpu/<job id>-<random>``, made by path in whatever directory the batch
script ran in: in a shared project or scratch directory another user could swap it for one
of their own and send the workers to their scheduler (#38). Now:

- by default it goes into the per-user private directory of cluster mode,
  ``<log directory>/.hpcgpu-<uid>/`` (``~/.cache/hpcgpu/logs/.hpcgpu-<uid>``);
- a ``--work-dir`` is accepted only where no other user can replace any directory of its
  path (:mod:`hpcgpu.system.safedir`); the scheduler and the workers on other nodes read
  by path, and the path rule is what protects them;
- the runner holds the directories open and makes every file relative to them;
- a later run removes the job directories whose process (same host) or batch job is gone
  (:func:`hpcgpu.system.userdir.prune_stale`): a SIGKILL leaves its directory behind.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hpcgpu.schedulers.registry import get_scheduler, scheduler_names
from hpcgpu.system import spawn
from hpcgpu.system.logdir import default_log_directory
from hpcgpu.system.safedir import HeldDirectory, check_private_path
from hpcgpu.system.userdir import owner_line, prune_stale, user_directory

__all__ = ["JobDirectory", "open_job_directory", "job_gone", "job_label", "WORK_DIR_FIX"]

#: What to do about a refused --work-dir.
WORK_DIR_FIX = ("leave --work-dir out (hpcgpu then uses a private directory under "
                "~/.cache/hpcgpu/logs), or use a directory only you can write "
                "(mkdir -m 700 ~/hpcgpu-work; --work-dir ~/hpcgpu-work)")


@dataclass
class JobDirectory:
    """A job directory made and held by this run.

    Attributes
    ----------
    held : HeldDirectory
        The directory, open; files go in through :meth:`write_private`.
    made_work_dir : Path or None
        A ``--work-dir`` that this run made (removed at the end if empty).
    """

    held: HeldDirectory
    made_work_dir: Path | None = None

    @property
    def path(self) -> Path:
        """Its real path: what the scheduler, the workers and the script are given."""
        return self.held.path

    def write_private(self, name: str, text: str) -> Path:
        """A new file (mode 0600) in the held directory; its path."""
        return self.held.write_private(name, text)

    def remove(self) -> None:
        """Remove it and everything in it (never raises), and a ``--work-dir`` this run
        made if nothing else is in it (another job's directory may be)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self.made_work_dir is not None:
            try:
                self.made_work_dir.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        """Let go of the descriptor."""
        self.held.close()


def job_label(scheduler: str | None, job_id: str | None, env=os.environ) -> str | None:
    """What a job directory records of its batch job: ``slurm:42@<cluster>``.

    >>> job_label("slurm", "42", {"SLURM_CLUSTER_NAME": "north"}), job_label("sge", "7", {})
    ('slurm:42@north', 'sge:7')
    >>> job_label(None, None) is None
    True
    """
    if not (scheduler and job_id):
        return None
    cluster = _cluster_name(scheduler, env)
    return f"{scheduler}:{job_id}" + (f"@{cluster}" if cluster else "")


def _cluster_name(kind: str, env) -> str | None:
    # a home directory shared by several clusters holds job directories whose job ids mean
    # nothing to this one's queue: the job's label names its cluster
    return get_scheduler(kind).cluster_name(env) if kind in scheduler_names() else None


def job_gone(job: str, env=os.environ) -> bool:
    """Whether the batch job ``job`` (``slurm:42@north``, see :func:`job_label`) has ended,
    as its batch system says; False when it cannot tell (no command, no answer, or a job of
    another cluster than the one this run is in): the directory stays.

    >>> job_gone("pbs:1"), job_gone("nonsense")
    (False, False)
    >>> job_gone("slurm:42@south", {"SLURM_CLUSTER_NAME": "north"})  # not asked
    False
    """
    kind, _, job_id = job.partition(":")
    job_id, _, cluster = job_id.partition("@")
    if kind not in scheduler_names() or cluster != (_cluster_name(kind, env) or ""):
        return False  # another cluster's job: this one's queue does not know it
    scheduler = get_scheduler(kind)
    argv = scheduler.ended_argv(job_id)
    if argv is None:
        return False
    try:
        done = spawn.run(argv, timeout=20)  # dies with this process, as every command hpcgpu starts
    except (OSError, subprocess.TimeoutExpired):
        return False
    return scheduler.ended(done.returncode, done.stdout, done.stderr)


def _work_parent(work_dir: str | None) -> tuple[HeldDirectory, Path | None]:
    """The directory job directories go in, checked and held, and whether this run made it."""
    if work_dir is None:
        logs = check_private_path(default_log_directory(), "--work-dir's default", WORK_DIR_FIX)
        logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        user = user_directory(logs, "log directory (the default of --work-dir)")
        return HeldDirectory(user, "--work-dir", WORK_DIR_FIX), None
    real = check_private_path(os.path.expanduser(work_dir), "--work-dir", WORK_DIR_FIX)
    made = None if real.exists() else real
    try:
        real.mkdir(mode=0o700, parents=True, exist_ok=True)
        return HeldDirectory(real, "--work-dir", WORK_DIR_FIX), made
    except OSError as error:  # a message, not a traceback: hpcgpu run exits 2 with it
        raise ValueError(f"--work-dir {work_dir}: {error.strerror}: {WORK_DIR_FIX}") from None


def open_job_directory(work_dir: str | None, scheduler: str | None,
                       job_id: str | None) -> JobDirectory:
    """Check, make and hold ``<work dir>/<job id>-<random>`` (mode 0700); prune stale ones.

    Raises ``ValueError`` naming ``--work-dir`` and the fix where another user could
    replace a directory of the path.

    Examples
    --------
    >>> import tempfile
    >>> job = open_job_directory(tempfile.mkdtemp(), "slurm", "42")
    >>> job.path.name.startswith("42-"), (job.path / "owner").read_text().split()[2].split("@")[0]
    (True, 'slurm:42')
    >>> job.remove(); job.close()
    """
    parent, made = _work_parent(work_dir)
    with parent:
        prune_stale(parent.path, job_gone)
        held = parent.make_private(f"{job_id or 'local'}-{secrets.token_hex(4)}")
    held.write_private("owner", owner_line(job_label(scheduler, job_id)))
    return JobDirectory(held, made)
