"""The fork server forked from the launcher (hpcgpu.worker.forkedserver): one start-up per host,
with the guarantees of Python's own fork server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

from conftest import wait_for

def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended). One call to psutil: a process may end
    between ``pid_exists`` and ``Process(pid).status()`` (NoSuchProcess, seen in CI)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


PROBE = r"""
import json, multiprocessing, os, socket
import json as marked
from hpcgpu.worker.forkedserver import start_forked_server

def report(queue, late):
    held = late in {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                    if os.path.exists(f"/proc/self/fd/{fd}")}
    queue.put({"ppid": os.getppid(), "mark": getattr(__import__("json"), "MARK", None),
               "late_fd_held": held, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")})

marked.MARK = "imported once, in the launcher"
server = start_forked_server(["json"])
late = socket.socket()  # opened after the server: no worker may hold it
late.bind(("127.0.0.1", 0))
ctx = multiprocessing.get_context("forkserver")
queue = ctx.Queue()
os.environ["CUDA_VISIBLE_DEVICES"] = "7"
child = ctx.Process(target=report, args=(queue, os.readlink(f"/proc/self/fd/{late.fileno()}")))
child.start()
got = queue.get(timeout=30)
child.join(30)
again = start_forked_server(["json"])
print(json.dumps({"server": server, "again": again, "me": os.getpid(), **got}), flush=True)
"""


def test_workers_fork_from_a_server_forked_from_the_launcher_and_it_ends_with_it():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    # as from Python's server: the server's environment; a nanny passes each worker its GPU
    assert out["gpu"] is None
    assert out["ppid"] == out["server"] != out["me"]  # the child's parent: the forked server
    assert out["mark"] == "imported once, in the launcher"  # inherited, not imported again
    assert out["late_fd_held"] is False, out  # only the descriptors it is sent
    assert out["again"] is None  # never a second server
    # the launcher has exited: its server goes with it
    wait_for(lambda: not _running(out["server"]), 10, interval=0.05, what="the forked server to exit")


SIGNAL_PROBE = r"""
import json, multiprocessing, os, signal, sys
from hpcgpu.worker.forkedserver import start_forked_server

def child(queue, signum):
    queue.put(os.getpid())
    queue.close()
    queue.join_thread()  # sent before the signal
    os.kill(os.getpid(), signum)  # no handler of its own: the default ends it
    queue.put("survived")

server = start_forked_server(["json"])
ctx = multiprocessing.get_context("forkserver")
seen = {}
for signum in map(int, sys.argv[1:]):
    held = ctx.Queue()
    first = ctx.Process(target=child, args=(held, signum))
    first.start()  # the server's handlers are in place once it serves
    first.join(30)
    os.kill(server, signum)  # what scancel or SLURM's --signal=USR1@N does to every process of the step
    queue = ctx.Queue()
    second = ctx.Process(target=child, args=(queue, signum))
    second.start()  # only a live server can fork it
    pid = queue.get(timeout=30)
    second.join(30)
    seen[signum] = {"first": first.exitcode, "second": second.exitcode, "pid": pid}
print(json.dumps({"seen": seen, "server": server}))
"""


def test_the_server_outlives_the_job_s_signals_and_its_workers_keep_the_default():
    """A batch system signals every process of the job step, the fork server too. It survives
    USR1 (the drain: else the nannies lose the exit reports of drained workers and start them
    again) and TERM (scancel: else a nanny still starting reads exit code 255, "killed by
    unknown signal", instead of the worker's SIGTERM, and ends in a traceback); a worker
    that sets no handler of its own dies of either, and its nanny reads that signal."""
    signals = (signal.SIGUSR1, signal.SIGTERM)
    done = subprocess.run([sys.executable, "-c", SIGNAL_PROBE, *map(str, map(int, signals))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    for signum in signals:
        seen = out["seen"][str(int(signum))]
        assert seen["first"] == seen["second"] == -signum, (signum, out)
        assert seen["pid"] != out["server"]


def test_a_long_tmpdir_still_gets_its_server(tmp_path):
    """Job scripts and sites set long TMPDIRs: the server's socket path (multiprocessing's
    directory under TMPDIR) must still fit a Unix socket's 108 bytes."""
    long_tmp = tmp_path / ("d" * 60) / ("e" * 60)
    long_tmp.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, TMPDIR=str(long_tmp)))
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["ppid"] == out["server"] != out["me"], out


def _tls_args(security: Security, directory) -> list[str]:
    paths = []
    for name, text in (("ca", security.tls_ca_file), ("cert", security.tls_worker_cert),
                       ("key", security.tls_worker_key)):
        (directory / name).write_text(text)
        paths.append(str(directory / name))
    return ["--tls-ca-file", paths[0], "--tls-cert", paths[1], "--tls-key", paths[2]]


@pytest.mark.parametrize("gpus,interface", [("4,5", "lo"), ("4", None)])
def test_the_entry_point_forks_its_pinned_workers_and_a_killed_launcher_leaves_nothing(tmp_path, gpus, interface):
    """The default, TLS on, with several GPUs and with one (no second interpreter for its
    worker): workers pinned, children of the server that the launcher forked; SIGKILL of the
    launcher (the job's end at its hardest) ends them all. With ``--interface`` too, whose
    link watch is a thread: started before the server, it made the launcher fall back to
    Python's fork server (whose socket under a long TMPDIR did not fit: nanny-start-failed)."""
    expected = gpus.split(",")
    security = Security.temporary()
    with LocalCluster(n_workers=0, processes=False, protocol="tls", security=security,
                      dashboard_address=None) as cluster, Client(cluster, security=security) as client:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "fs",
             "--gpus-per-node", str(len(expected)), "--death-timeout", "30", *_tls_args(security, tmp_path),
             *(["--interface", interface] if interface else [])],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=gpus, SLURM_JOB_ID=""))
        try:
            client.wait_for_workers(len(expected), timeout=60)
            seen = client.run(lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.getppid()))
            assert sorted(gpu for gpu, _ in seen.values()) == expected
            (server,) = {parent for _, parent in seen.values()}
            assert psutil.Process(server).ppid() == proc.pid
            # forked from the launcher (its command line), not Python's server (`-c ...forkserver...`)
            assert psutil.Process(server).cmdline() == psutil.Process(proc.pid).cmdline()
            assert all(a.startswith("tls://") for a in seen)
            tree = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        wait_for(lambda: not [p for p in tree if _running(p)], 15,
                 interval=0.1, what=f"every process of the killed launcher's tree {tree} to end")



def test_python_s_fork_server_under_a_long_tmpdir_gives_way_to_spawn(tmp_path):
    """Python's fork server (``--multiprocessing-method forkserver``, the default with UCX and
    several GPUs) listens on a socket under TMPDIR: under a long one ``AF_UNIX path too long``
    failed every nanny, and the command then waited for ever. The worker now starts, spawned."""
    long_tmp = tmp_path / ("t" * 90)
    long_tmp.mkdir()
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "long",
             "--gpus-per-node", "1", "--death-timeout", "30", "--multiprocessing-method", "forkserver"],
            env=dict(os.environ, TMPDIR=str(long_tmp), CUDA_VISIBLE_DEVICES="4", SLURM_JOB_ID=""),
            stderr=subprocess.PIPE, text=True)
        try:
            client.wait_for_workers(1, timeout=60)
            arrived = True
        except Exception:  # noqa: BLE001 - said below, with what the command wrote
            arrived = False
        finally:
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=30)
    assert arrived, err[:4000]
    assert "too long for Python's fork server's socket" in err, err[-3000:]
    assert "AF_UNIX path too long" not in err, err[-3000:]
