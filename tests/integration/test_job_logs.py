"""Job logs to the user (#43 item 7): ``cluster.get_logs()``/``cluster.logs()`` per job (the
files the scheduler wrote) and per worker (its Dask log), ended jobs included; ``hpcgpu logs
JOB_ID`` for the user's own jobs, never through a link; "not reachable from here" for a
node-local log directory. On the real local SLURM 22.05 (nodes node1-4 on host vm), Grid
Engine 8.1.9 and OpenPBS 23.06.06 (which copies a job's output when the job ends).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import PBSCluster, SGECluster, SLURMCluster
from hpcgpu.cluster.batch.logs import job_log_files

PROLOGUE = ["echo said-on-stdout", "echo said-on-stderr >&2"]


def hpcgpu_logs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcgpu", "logs", *args], capture_output=True,
                          text=True, timeout=120)


def check_logs_of_a_job(cluster, streams: list[str], spooled: bool = False) -> tuple[str, str]:
    """Scale to one job, check its logs while it runs and after it ended; (job id, name).
    ``spooled``: the scheduler copies the job's output to the log directory when it ends."""
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=1, timeout=180)
    job = cluster.jobs[0]
    worker = job.workers[0]
    label = f"job {job.name} ({job.job_id})"
    said = "not here until the job ends" if spooled else "said-on-stderr"
    wait_for(lambda: said in cluster.get_logs(workers=False)[f"{label} {streams[-1]}"],
             timeout=60, what="the job's stderr")
    logs = cluster.get_logs()
    assert list(logs)[:2] == ["Cluster", "Scheduler"]
    assert [k for k in logs if k.startswith(("job ", "worker "))] == [
        *(f"{label} {s}" for s in streams), f"worker {worker}"]
    assert ("not here" if spooled else "said-on-stdout") in logs[f"{label} {streams[0]}"]
    assert "distributed.worker" in logs[f"worker {worker}"]  # its Dask log, from the worker
    assert "Register worker" in logs["Scheduler"]
    stamps = [line[:23] for line in logs["Scheduler"].splitlines() if line[:2] == "20"]
    assert stamps == sorted(stamps)  # oldest first, as in a file
    assert list(cluster.logs(lines=1)) == list(logs)
    # the last N lines: the path line, then N lines of the file
    assert spooled or all(len(cluster.logs(lines=1, workers=False)[f"{label} {s}"].splitlines())
                          == 2 for s in streams)
    cluster.scale(jobs=0)
    wait_for(lambda: cluster.jobs[0].state in ("completed", "cancelled", "failed"),
             timeout=120, what="the job's end")
    wait_for(lambda: "said-on-stdout" in cluster.get_logs(workers=False)[f"{label} {streams[0]}"],
             timeout=60, what="the ended job's stdout")  # kept until pruned
    return job.job_id, job.name


@pytest.mark.slurm
def test_slurm_job_logs_per_job_and_worker_and_the_command(slurm, clusters, tmp_path):
    cluster = clusters(SLURMCluster, **FAST, gpus_per_node=1, job_script_prologue=PROLOGUE)
    job_id, name = check_logs_of_a_job(cluster, ["stdout", "stderr"])
    done = hpcgpu_logs(job_id, "--log-directory", str(tmp_path / "logs"), "-n", "3")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "logs" / f"hpcgpu-{job_id}.out"
    assert done.stdout.startswith(f"==> {out} <==\n")
    assert f"==> {out.with_suffix('.err')} <==" in done.stdout
    assert len(done.stdout.splitlines()) <= 2 * 4
    # the file is on the node's own disk, not here (/tmp is node-local; the job ran on nodeN)
    out.unlink()
    text = cluster.get_logs(workers=False)[f"job {name} ({job_id}) stdout"]
    assert f"{out}: not reachable from here: {out.parent} is on a node-local filesystem" in text
    assert "the job ran on node" in text


@pytest.mark.sge
def test_sge_job_logs_one_file_for_both_streams(sge, clusters, tmp_path):
    cluster = clusters(SGECluster, **FAST, gpus_per_node=1, job_script_prologue=PROLOGUE)
    job_id, _ = check_logs_of_a_job(cluster, ["stdout+stderr"])
    done = hpcgpu_logs(job_id, "--log-directory", str(tmp_path / "logs"))
    assert done.returncode == 0 and "said-on-stderr" in done.stdout, done.stderr
    assert done.stdout.startswith(f"==> {tmp_path / 'logs'}/hpcgpu.o{job_id} <==")


@pytest.mark.pbs
def test_pbs_job_logs_copied_when_the_job_ends(pbs, clusters, tmp_path):
    cluster = clusters(PBSCluster, **FAST, gpus_per_node=1, job_script_prologue=PROLOGUE)
    job_id, _ = check_logs_of_a_job(cluster, ["stdout+stderr"], spooled=True)
    done = hpcgpu_logs(job_id, "--log-directory", str(tmp_path / "logs"))
    assert done.returncode == 0 and "said-on-stderr" in done.stdout, done.stderr
    assert done.stdout.startswith(f"==> {tmp_path / 'logs'}/{job_id}.OU <==")


def test_the_command_shows_only_your_own_files_never_through_a_link(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    (logs / "hpcgpu-11.out").write_text("".join(f"line {i}\n" for i in range(500)))
    done = hpcgpu_logs("11", "-d", str(logs))
    assert done.returncode == 0 and done.stdout.splitlines()[1:] == [
        f"line {i}" for i in range(400, 500)]  # the last 100 by default
    os.symlink("/etc/passwd", logs / "hpcgpu-12.out")
    done = hpcgpu_logs("12", "-d", str(logs))
    assert done.returncode == 1 and "is a symbolic link: not followed" in done.stderr
    assert "root:" not in done.stdout
    if os.geteuid() == 0:  # another user's job: its file belongs to them
        (logs / "hpcgpu-13.err").write_text("theirs\n")
        os.chown(logs / "hpcgpu-13.err", 65534, 65534)
        done = hpcgpu_logs("13", "-d", str(logs))
        assert done.returncode == 1 and "only your own jobs' logs are shown" in done.stderr
        assert "theirs" not in done.stdout
    done = hpcgpu_logs("14", "-d", str(logs))
    assert done.returncode == 1 and "no log of job 14 in" in done.stderr
    # /tmp here is a local disk (ext4): a job on another node would have written there
    assert (f"if the job ran on another node, its logs are there: not reachable from here, "
            f"{logs} is on a node-local filesystem") in done.stderr


def test_the_command_takes_an_arrays_id(tmp_path):
    """``hpcgpu logs 31`` for the array ``sbatch`` answered 31 to (scale of 2 jobs or more):
    each element's files, where it found none and said the logs might be pruned."""
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    for element in (0, 1):
        (logs / f"hpcgpu-31_{element}.out").write_text(f"out {element}\n")
        (logs / f"hpcgpu-31_{element}.err").write_text(f"err {element}\n")
    done = hpcgpu_logs("31", "-d", str(logs))
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if not line.startswith("==>")] == [
        "out 0", "err 0", "out 1", "err 1"]
    assert hpcgpu_logs("31_1", "-d", str(logs)).stdout.count("==>") == 2


def test_a_log_directory_another_user_can_change_is_not_read(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hpcgpu-21.out").write_text("x\n")
    os.chmod(shared, 0o777)
    done = hpcgpu_logs("21", "-d", str(shared))
    assert done.returncode == 1 and "is writable by every user" in done.stderr
    files = job_log_files(str(shared / "hpcgpu-21.err"), "running", ("node1",))
    assert [f.text for f in files] == [None, None]
    assert "is writable by every user" in files[0].problem


def test_a_node_local_log_directory_is_said_to_be_unreachable(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    pending, ran = (job_log_files(str(logs / "j-5.err"), state, ("node9",))
                    for state in ("pending", "completed"))
    assert pending[0].problem == f"{logs}/j-5.out: not written yet (the job is pending)"
    assert "not reachable from here" in ran[0].problem  # /tmp: a local filesystem here
    assert "ssh node9 tail" in ran[0].problem
