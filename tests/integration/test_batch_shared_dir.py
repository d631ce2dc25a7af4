"""#38 break 1 on the real local SLURM, with a second user: ``hpcgpu run`` started from a
shared scratch directory (mode 1777) where ``nobody`` made ``.hpcgpu`` (0777) and swaps
every new directory in it for one of theirs, with their scheduler's address. The run uses
its own private directory and its own scheduler; a ``--work-dir`` there is refused, saying
why and what to do. And a later run prunes the job directories of jobs that have ended."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from batchtools import CHECK, ROOT, hpcgpu_run, job_output, processes_with, sbatch_wrap, slurm_finished
from conftest import wait_for
from hpcgpu.runner.jobdir import open_job_directory

pytestmark = pytest.mark.slurm

RUN = f"{sys.executable} -m hpcgpu run --dashboard-address '' --timeout 240"
# Run by nobody with the system Python: swap each new entry of .hpcgpu for nobody's own.
ATTACK = r"""
import json, os, sys, time
work, log = sys.argv[1], sys.argv[2]
seen = set(os.listdir(work))
while True:
    for name in set(os.listdir(work)) - seen:
        seen |= {name, name + ".away"}
        try:
            os.rename(os.path.join(work, name), os.path.join(work, name + ".away"))
            os.mkdir(os.path.join(work, name), 0o777)
            with open(os.path.join(work, name, "scheduler.json"), "w") as f:
                json.dump({"address": "tls://127.0.0.1:6666"}, f)
            result = "swapped"
        except OSError as error:
            result = f"denied {error.errno}"
        with open(log, "a") as f:
            f.write(f"{name} {result}\n")
    time.sleep(0.002)
"""


@pytest.fixture
def scratch():
    """``<base>/scratch`` (1777) with nobody's ``.hpcgpu`` (0777) and nobody watching it."""
    base = Path(tempfile.mkdtemp(prefix="hpcgpu-scratch-", dir="/tmp"))
    os.chmod(base, 0o755)
    scratch = base / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)
    subprocess.run(["runuser", "-u", "nobody", "--", "mkdir", "-m", "777", str(scratch / ".hpcgpu")],
                   check=True, timeout=30)
    attacker = subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", ATTACK,
                                 str(scratch / ".hpcgpu"), str(scratch / "attack.log")])
    try:
        yield scratch
    finally:
        attacker.kill()
        attacker.wait(30)
        shutil.rmtree(base, ignore_errors=True)


def run_job(where: Path, cache: Path, args: str) -> tuple[tuple[str, str], str]:
    job_id = sbatch_wrap(where, ["-N1", "--ntasks-per-node=1", "--gpus-per-node=1",
                                f"--export=ALL,XDG_CACHE_HOME={cache}"],
                         f"{RUN} {args} {CHECK} --expect 1", name="hpcgpu-shared-dir")
    state = wait_for(lambda: slurm_finished(job_id), 240, 0.5, what=f"job {job_id}")
    return state, job_output(where, f"{job_id}.out")


def test_a_run_from_a_shared_directory_keeps_its_own_scheduler(slurm, scratch, tmp_path):
    os.chmod(tmp_path, 0o755)  # the job's output goes to the scratch directory: nobody may read
    state, text = run_job(scratch, tmp_path / "cache", "")
    assert state == ("COMPLETED", "0:0"), text[-4000:]
    assert "hpcgpu run: scheduler tls://" in text and "6666" not in text, text[-4000:]
    assert os.listdir(scratch / ".hpcgpu") == []  # nothing of the victim's there
    user = tmp_path / "cache" / "hpcgpu" / "logs" / f".hpcgpu-{os.getuid()}"
    assert user.is_dir() and list(user.iterdir()) == []

    state, text = run_job(scratch, tmp_path / "cache", f"--work-dir {scratch / '.hpcgpu'}")
    assert state == ("FAILED", "2:0"), text[-4000:]
    assert (f"--work-dir {scratch}/.hpcgpu: {scratch} has the sticky bit, but the entry below "
            "it belongs to uid 65534, who can rename it: another user could replace what hpcgpu "
            "makes below it and run code as you; leave --work-dir out") in " ".join(text.split())
    assert os.listdir(scratch / ".hpcgpu") == []  # refused before anything was made
    assert not (scratch / "attack.log").exists()  # the attacker never saw a directory of ours


def test_a_sticky_shared_work_dir_is_accepted_and_nobody_cannot_swap_in_it(slurm, scratch):
    state, text = run_job(scratch, scratch / "unused-cache", f"--work-dir {scratch}")
    assert state == ("COMPLETED", "0:0"), text[-4000:]
    assert "hpcgpu run: scheduler tls://" in text and "6666" not in text, text[-4000:]


def ended_job() -> str:
    job_id = subprocess.run(["sbatch", "--parsable", "--mem=100M", "--time=1", "-o", "/dev/null",
                             "--wrap", "true"], capture_output=True, text=True, check=True,
                            timeout=60).stdout.strip().split(";")[0]
    wait_for(lambda: slurm_finished(job_id), 120, 0.5, what=f"job {job_id}")
    return job_id


def test_a_later_run_prunes_the_directories_of_ended_jobs(slurm, tmp_path, monkeypatch):
    """A run killed with SIGKILL leaves its job directory (on whichever node ran it); the
    next run removes those whose job SLURM says has ended, and keeps a running job's and
    another cluster's (a home shared by two clusters: this one's squeue does not know that
    job id, which is no sign that the job ended)."""
    cluster = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                             timeout=60).stdout.split("ClusterName")[1].split("=")[1].split()[0]
    monkeypatch.setenv("SLURM_CLUSTER_NAME", cluster)  # as in the job that runs hpcgpu run
    running = subprocess.run(["sbatch", "--parsable", "--mem=100M", "--time=5", "-o", "/dev/null",
                              "--wrap", "sleep 300"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.strip().split(";")[0]
    try:
        work = tmp_path / "work"
        work.mkdir(mode=0o700)
        for name, job in (("ended", f"{ended_job()}@{cluster}"), ("running", f"{running}@{cluster}"),
                          ("another-cluster's", "999999@another")):
            (work / name).mkdir()
            (work / name / "owner").write_text(f"another-{socket.gethostname()} 1 slurm:{job}\n")
        job = open_job_directory(str(work), "slurm", "1")
        assert sorted(p.name for p in work.iterdir()) == sorted(["running", "another-cluster's", job.path.name])
        assert (job.path / "owner").read_text().split()[2] == f"slurm:1@{cluster}"
        job.remove()
        job.close()
    finally:
        subprocess.run(["scancel", running], timeout=60)


def test_a_job_directory_left_by_sigkill_goes_with_the_next_run(slurm, tmp_path):
    """#38's unclear case: ``kill -9`` of ``hpcgpu run`` leaves its job directory (and key);
    the next run of the same user removes it, since the process that made it is gone."""
    work, marker = tmp_path / "work", f"HPCGPU_TEST_MARKER={uuid.uuid4().hex}"
    work.mkdir(mode=0o700)
    job_id = sbatch_wrap(tmp_path, ["-N1", "--ntasks-per-node=1", "--gpus-per-node=1"],
                         f"{marker} {RUN} --work-dir {work} {CHECK} --marker {tmp_path}/started "
                         "--sleep 300", name="hpcgpu-sigkill-prune")
    try:
        wait_for(lambda: (tmp_path / "started").exists() or slurm_finished(job_id), 240, 0.2,
                 what="the script to start")
        (left,) = work.glob("*/key.pem")
        (run,) = hpcgpu_run(marker)
        os.kill(run, signal.SIGKILL)
        wait_for(lambda: slurm_finished(job_id), 120, 0.2, what=f"job {job_id} to end")
        assert left.exists()  # nothing could remove it
    finally:
        subprocess.run(["scancel", job_id], timeout=60)
    job = open_job_directory(str(work), "slurm", "2")
    assert [p.name for p in work.iterdir()] == [job.path.name]
    job.remove()
    job.close()


#: Put by nobody in the shared directory: a package and a module that Python would import
#: from a job's working directory first (python -m puts it first on sys.path).
PLANT = r"""
import os, sys
where = sys.argv[1]
code = "import os\nopen(os.path.join(%r, 'ran-%%d' %% os.getpid()), 'w').close()\n" % where
os.mkdir(os.path.join(where, "hpcgpu"), 0o755)
open(os.path.join(where, "hpcgpu", "__init__.py"), "w").write(code)
open(os.path.join(where, "lz4.py"), "w").write(code + "raise ImportError('planted')\n")
"""


def sge_exit_status(job_id: str) -> tuple[int] | None:
    """(exit status,) from qacct once the job has finished (a tuple: 0 is an answer), else None."""
    if subprocess.run(["qstat", "-j", job_id], capture_output=True, text=True, timeout=60).returncode == 0:
        return None
    out = subprocess.run(["qacct", "-j", job_id], capture_output=True, text=True, timeout=60).stdout
    return next(((int(line.split()[1]),) for line in out.splitlines() if line.startswith("exit_status")), None)


@pytest.mark.sge
def test_grid_engine_batch_template_from_a_shared_directory(sge, scratch, tmp_path):
    """jobscripts/sge-1x4.sge submitted from the scratch directory (``-wd``), where nobody
    swaps every new entry of their ``.hpcgpu`` and has put ``hpcgpu/`` and ``lz4.py``: the
    run keeps its own scheduler and directory, and nothing of nobody's is imported (the
    template used ``python -m hpcgpu run``, which ran both as root)."""
    subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", PLANT, str(scratch)],
                   check=True, timeout=30)
    os.chmod(tmp_path, 0o755)
    argv = ["qsub", "-terse", "-pe", "smp", "1", "-l", "gpu=1", "-l", "h_rt=00:05:00", "-j", "y",
            "-o", str(tmp_path), "-wd", str(scratch), "-v", f"HPCGPU_PYTHON={sys.executable}",
            "-v", f"XDG_CACHE_HOME={tmp_path / 'cache'}",
            str(ROOT / "jobscripts" / "sge-1x4.sge"), str(CHECK), "--expect", "1"]
    job_id = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    status = wait_for(lambda: sge_exit_status(job_id), 240, 0.5, what=f"SGE job {job_id}")
    text = job_output(tmp_path, "*.o*")
    assert status == (0,), text[-4000:]
    assert "hpcgpu run: scheduler tls://" in text and "6666" not in text, text[-4000:]
    assert sorted(p.name for p in scratch.glob("ran-*")) == []  # nobody's code never ran
    assert os.listdir(scratch / ".hpcgpu") == [] and not (scratch / "attack.log").exists()
