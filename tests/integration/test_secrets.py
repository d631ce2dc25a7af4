"""No job script carries key material, and job files live in a directory of the user's own
(issue 26, breaks 1 and 2): unit checks on every dialect and job kind, then the real SLURM,
Grid Engine and OpenPBS, read by a second local user (``nobody``)."""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import subprocess
import sys
import warnings
from operator import add
from pathlib import Path

import pytest

from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import LSFCluster, PBSCluster, SGECluster, SLURMCluster
from hpcgpu.cluster.batch.job_events import Seen
from hpcgpu.cluster.batch.private import user_directory

CLASSES = {"slurm": SLURMCluster, "pbs": PBSCluster, "lsf": LSFCluster, "sge": SGECluster}
NOBODY = ["runuser", "-u", "nobody", "--"]


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    """``argv`` run by the second local user."""
    return subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=60)


def key_lines(cluster) -> list[str]:
    """The lines of the cluster's private key and certificate, base64 bodies only."""
    pems = (cluster.security.tls_worker_key, cluster.security.tls_worker_cert)
    return [line for pem in pems for line in pem.strip().splitlines() if "-----" not in line]


def leaked(text: str, cluster) -> list[str]:
    return [line for line in key_lines(cluster) if line in text]


@pytest.fixture
def shared_logs():
    """A log directory every user may write, with the sticky bit (mode 1777: a shared
    scratch directory; 0777 is refused, #38), under a parent all may enter (pytest's own
    temporary directories are root's, mode 0700)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="hpcgpu-shared-", dir="/tmp"))
    os.chmod(base, 0o755)
    logs = base / "logs"
    logs.mkdir()
    os.chmod(logs, 0o1777)
    yield logs
    shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- the private directory
def test_private_directory_is_the_users_with_mode_0700(tmp_path):
    os.chmod(tmp_path, 0o2775)  # a group's setgid project directory is a fine parent
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning either
        made = user_directory(tmp_path)
    info = made.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.getuid(), 0o700)
    assert user_directory(tmp_path) == made  # used again as it is


def test_private_directory_of_another_user_or_mode_is_refused(tmp_path):
    path = tmp_path / f".hpcgpu-{os.getuid()}"
    path.mkdir(mode=0o700)
    os.chmod(path, 0o755)
    with pytest.raises(ValueError, match=r"log_directory=.*mode 0755, not 0700.*chmod 700"):
        user_directory(tmp_path)
    os.chmod(path, 0o700)
    os.chown(path, 65534, 65534)  # nobody's
    with pytest.raises(ValueError, match=r"log_directory=.*not a directory of yours \(owner uid "
                                         r"65534\).*choose another log_directory"):
        user_directory(tmp_path)
    path.rmdir()
    path.symlink_to(tmp_path)  # a link planted in its place is not followed
    with pytest.raises(ValueError, match="not a directory of yours"):
        user_directory(tmp_path)


def test_a_parent_other_users_can_change_is_refused_and_a_group_one_warned(tmp_path):
    """#38: a log directory (or shared_temp_directory) where another user could rename
    .hpcgpu-<uid> away: writable by all without the sticky bit, or another user's."""
    for mode, owner, says in ((0o777, 0, r"is writable by every user \(mode 0777\) and has no sticky bit"),
                              (0o755, 65534, r"belongs to uid 65534, who can change it"),
                              (0o1777, 65534, r"belongs to uid 65534, who can change it")):
        logs = tmp_path / f"logs-{mode:o}-{owner}"
        logs.mkdir()
        os.chown(logs, owner, 65534)
        os.chmod(logs, mode)
        with pytest.raises(ValueError, match=rf"log_directory='{logs}': {logs} {says}: another user "
                                             r"could replace .*choose a log_directory of your own"):
            user_directory(logs)
        assert not (logs / f".hpcgpu-{os.getuid()}").exists()
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, 0, 65534)  # a group with other members (nobody)
    os.chmod(project, 0o2775)
    with pytest.warns(UserWarning, match=r"is writable by the members of group 65534 .*shared "
                                         r"project directories"):
        user_directory(project)


def test_cluster_refuses_a_foreign_private_directory_before_anything_starts(tmp_path):
    logs = tmp_path / "logs"
    (logs / f".hpcgpu-{os.getuid()}").mkdir(parents=True, mode=0o777)
    os.chmod(logs / f".hpcgpu-{os.getuid()}", 0o777)
    with pytest.raises(ValueError, match="log_directory=.*mode 0777"):
        SLURMCluster(gpus_per_node=1, log_directory=str(logs))
    other = tmp_path / "shared"
    other.mkdir()
    (other / f".hpcgpu-{os.getuid()}").mkdir(mode=0o755)
    with pytest.raises(ValueError, match="shared_temp_directory=.*mode 0755"):
        SLURMCluster(gpus_per_node=1, log_directory=str(logs / "x"), shared_temp_directory=str(other))


# ---------------------------------------------------------------- every dialect and job kind
KINDS = {
    "gpu": dict(gpus_per_node=2),
    "cpu": dict(cores=2, memory="2GB"),
    "cpu-pool": dict(gpus_per_node=1, pools={"cpu": dict(gpus_per_node=0, cores_per_node=2,
                                                         memory_per_node="2GB")}),
}


ARRAY = {"slurm": "#SBATCH --array=", "sge": "#$ -t ", "pbs": "#PBS -J ", "lsf": "[1-3]"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("scheduler", sorted(CLASSES))
def test_no_script_carries_key_material_and_none_is_a_file(scheduler, kind, tmp_path, fake_submit):
    options = dict(KINDS[kind], walltime="00:10:00" if scheduler != "lsf" else "00:10",
                   log_directory=str(tmp_path / "logs"), poll_interval=3600,
                   scheduler_options={"dashboard_address": "localhost:0"})
    if kind == "gpu" and scheduler in ("pbs", "lsf"):
        options["launcher"] = "direct"
    cluster = CLASSES[scheduler](**options)
    try:
        jobs = 3
        if kind == "cpu-pool":
            cluster.scale(jobs=jobs, pool="cpu")
        else:
            cluster.scale(jobs=jobs)  # GPU jobs: one array of 3 (job_arrays is on)
        submits = wait_for(lambda: [c for c in fake_submit if c[0][0] in ("sbatch", "qsub", "bsub")],
                           30, what="submissions")
        private = Path(cluster.private_directory.made)
        if kind == "gpu":  # the 3 jobs went as one array job
            assert len(submits) == 1 and ARRAY[scheduler] in submits[0][1], submits
        for argv, script in submits:
            # The script goes on standard input: no file another user could swap.
            assert argv in (["sbatch", "--parsable"], ["qsub", "-terse"], ["qsub"], ["bsub"])
            assert script and not leaked(script, cluster), leaked(script, cluster)
            assert "PRIVATE KEY" not in script and "DASK_DISTRIBUTED__COMM__TLS" not in script
            assert f"--tls-key {private}/key.pem" in script
            assert cluster.scheduler.address in script
        shown = cluster.job_script(pool="cpu" if kind == "cpu-pool" else None)
        assert f"--tls-key {private}/key.pem" in shown and cluster.scheduler.address in shown
        for name in ("ca.pem", "cert.pem", "key.pem"):
            info = (private / name).stat()
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.getuid(), 0o600)
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert not [p for p in (tmp_path / "logs").iterdir() if p.is_file()]  # no script file
    finally:
        cluster.close()
    assert not private.exists()  # the credentials go with the cluster


def test_walltime_replacement_job_carries_no_key(tmp_path, fake_submit):
    import time

    cluster = SLURMCluster(gpus_per_node=1, walltime="00:10:00", log_directory=str(tmp_path),
                           poll_interval=3600,
                           scheduler_options={"dashboard_address": "localhost:0"})
    try:
        submits = lambda: [c for c in fake_submit if c[0][0] == "sbatch"]  # noqa: E731
        cluster.scale(jobs=1)
        # submitted, with its id (a poll sees only such jobs)
        wait_for(lambda: len(submits()) == 1 and cluster.fleet.records
                 and all(r.job_id for r in cluster.fleet.records.values()), 30, what="the first job")
        (name,) = cluster.worker_spec
        # as if seen running an hour ago: near its walltime (on the loop, as the monitor's polls)
        cluster.loop.add_callback(cluster.fleet.apply, Seen(name, "running", at=time.monotonic() - 3600))
        cluster.loop.add_callback(cluster._replace_expiring)
        wait_for(lambda: len(submits()) == 2, 30, what="the replacement job")
        assert any("nears its walltime" in event for event in cluster.events)
        argv, script = submits()[1]
        assert argv == ["sbatch", "--parsable"] and not leaked(script, cluster)
        assert f"--tls-key {cluster.private_directory.made}/key.pem" in script
    finally:
        cluster.close()


def test_credentials_go_when_the_process_ends_without_close(tmp_path):
    code = (
        "import os\n"
        "from hpcgpu import SLURMCluster\n"
        f"c = SLURMCluster(gpus_per_node=1, log_directory={str(tmp_path)!r},\n"
        "                 scheduler_options={'dashboard_address': 'localhost:0'})\n"
        "print(c.private_directory.made, flush=True)\n"
        "assert os.path.exists(c.private_directory.made)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    made = done.stdout.strip().splitlines()[-1]
    assert made.startswith(str(tmp_path)) and not os.path.exists(made)  # removed at exit


def test_credentials_go_when_the_cluster_fails_to_start(tmp_path):
    import gc
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(Exception):
            SLURMCluster(gpus_per_node=1, log_directory=str(tmp_path),
                         scheduler_options={"dashboard_address": "localhost:0",
                                            "host": "127.0.0.1", "port": busy.getsockname()[1]})
    gc.collect()
    private = tmp_path / f".hpcgpu-{os.getuid()}"
    assert private.is_dir() and not list(private.iterdir())


def test_credentials_go_on_sigterm(tmp_path):
    code = (
        "import os, sys\n"
        "from hpcgpu import SLURMCluster\n"
        f"c = SLURMCluster(gpus_per_node=1, log_directory={str(tmp_path)!r},\n"
        "                 scheduler_options={'dashboard_address': 'localhost:0'})\n"
        "print(c.private_directory.made, flush=True)\n"
        "sys.stdin.read()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        made = process.stdout.readline().strip()
        assert made.startswith(str(tmp_path)) and os.path.isdir(made)
        process.terminate()
        assert process.wait(timeout=60) == -15  # died of the signal, as without hpcgpu
    finally:
        process.kill()
    assert not os.path.exists(made)


def test_cpu_jobs_log_into_the_log_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cluster = SLURMCluster(cores=1, memory="1GB", poll_interval=3600,
                           scheduler_options={"dashboard_address": "localhost:0"})
    try:
        logs = tmp_path / "cache" / "hpcgpu" / "logs"
        assert f"#SBATCH -o {logs}/" in cluster.job_script()
        assert f"#SBATCH -e {logs}/" in cluster.job_script()
    finally:
        cluster.close()


# ---------------------------------------------------------------- real schedulers, as nobody
def check_private(cluster, listing: list[str], spool: list[str]) -> None:
    """What another user can read holds no key; what holds the key, they cannot read."""
    private = Path(cluster.private_directory.made)
    for text in listing:  # qstat -j / scontrol show job, as nobody
        assert text.strip() and not leaked(text, cluster), text[:2000]
    for text in spool:  # the scheduler's copy of the script, where nobody may read it
        assert not leaked(text, cluster)
    for name in ("key.pem", "cert.pem", "ca.pem"):
        done = as_nobody("cat", str(private / name))
        assert done.returncode != 0 and "Permission denied" in done.stderr
    # Nobody can put a file of theirs in its place, nor next to it.
    done = as_nobody("sh", "-c", f"echo evil > {private}/key.pem || echo evil > {private}/x")
    assert done.returncode != 0 and "Permission denied" in done.stderr


def compute(cluster) -> None:
    from distributed import Client

    with Client(cluster) as client:
        assert client.submit(add, 20, 22).result(timeout=60) == 42


@contextlib.contextmanager
def one_job(cls, shared_logs):
    """``(cluster, job id)``: one job of ``cls`` that logs to the shared directory and has
    computed; its private directory is gone after the cluster closed."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a sticky shared directory is fine: no warning
        cluster = cls(gpus_per_node=1, log_directory=str(shared_logs), **FAST)
    try:
        cluster.scale(jobs=1)
        cluster.wait_for_workers(1, timeout=600)  # other jobs may fill the queue
        compute(cluster)
        (job_id,) = [job.job_id for job in cluster.workers.values()]
        yield cluster, job_id
    finally:
        cluster.close()
    assert not os.path.exists(cluster.private_directory.made)


@pytest.mark.sge
def test_sge_spool_listing_and_credentials(sge, shared_logs):
    with one_job(SGECluster, shared_logs) as (cluster, job_id):
        scripts = glob.glob(f"/var/spool/gridengine/execd/*/job_scripts/{job_id}")
        assert scripts  # the copy that Grid Engine's execd keeps (mode 0755)
        readable = [as_nobody("cat", path) for path in scripts]
        assert all(done.returncode == 0 for done in readable)  # anyone may read it...
        check_private(cluster, [as_nobody("qstat", "-j", job_id).stdout],
                      [done.stdout for done in readable])  # ...and it holds no key


@pytest.mark.slurm
def test_slurm_listing_spool_and_credentials(slurm, shared_logs):
    with one_job(SLURMCluster, shared_logs) as (cluster, job_id):
        listing = as_nobody("scontrol", "-dd", "show", "job", job_id).stdout
        script = subprocess.run(["scontrol", "write", "batch_script", job_id, "-"],
                                capture_output=True, text=True, timeout=60).stdout
        node = glob.glob(f"/var/lib/slurm/slurmd/*/job{int(job_id):05d}/slurm_script")
        controller = glob.glob(f"/var/lib/slurm/slurmctld/hash.*/job.{job_id}/*")
        assert node and {"script", "environment"} <= {Path(p).name for p in controller}
        spool = [Path(p).read_text(errors="ignore") for p in node + controller]
        assert script.startswith("#!")
        denied = as_nobody("scontrol", "write", "batch_script", job_id, "-")
        # SLURM gives it to its owner only (scontrol 22.05 still exits 0 then).
        assert not denied.stdout and "retrieval failed: Invalid user id" in denied.stderr
        check_private(cluster, [listing], [script, *spool])


@pytest.mark.pbs
def test_pbs_listing_spool_and_credentials(pbs, shared_logs):
    """The real OpenPBS: ``qstat -f`` (anyone may list any job: Variable_List, paths), its
    history after the job ended (``qstat -x -f``), the server's copy of the script
    (``printjob -s``, root) and the mom's (``mom_priv/jobs/<id>.SC``, root's, 0700)."""
    from conftest import PBS_BIN

    with one_job(PBSCluster, shared_logs) as (cluster, job_id):
        listing = as_nobody(f"{PBS_BIN}/qstat", "-f", job_id).stdout
        assert f"Job Id: {job_id}" in listing and "Variable_List" in listing
        script = subprocess.run([f"{PBS_BIN}/printjob", "-s", job_id], capture_output=True,
                                text=True, timeout=60).stdout
        assert "#PBS" in script
        (spooled,) = glob.glob(f"/var/spool/pbs/mom_priv/jobs/{job_id}.SC")
        denied = as_nobody("cat", spooled)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr
        check_private(cluster, [listing], [script, Path(spooled).read_text(errors="ignore")])
        keys = key_lines(cluster)
    history = as_nobody(f"{PBS_BIN}/qstat", "-x", "-f", job_id).stdout
    assert f"Job Id: {job_id}" in history and not [k for k in keys if k in history]


def test_close_removes_the_private_directory_wherever_it_was_moved(tmp_path):
    """#38 item 2: another member of a group-writable log directory renames the cluster's
    directory; close() still removes it (or warns, naming what was left, if it cannot)."""
    from hpcgpu.cluster.batch.private import PrivateDirectory
    from hpcgpu.runner.security import write_tls_files

    private = PrivateDirectory(str(tmp_path), "c")
    made = private.path
    write_tls_files(made)
    moved = tmp_path / "moved-away"
    os.rename(made.parent, moved)  # .hpcgpu-<uid> itself, as its parent's owner could
    private.remove()
    assert list(moved.iterdir()) == []
