"""LocalGPUCluster's worker processes come from a fork server (hpcgpu.worker.forkstart) and
see what spawned ones saw: their own CUDA_VISIBLE_DEVICES, the environment and standard error
of the process at their start (also after a restart), the main module imported again; other
Dask code in the same process keeps distributed's method; nothing is left after the end."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from multiprocessing import forkserver

import dask
import distributed.nanny
import psutil
from distributed import Client, LocalCluster, Nanny

from hpcgpu import LocalGPUCluster
from hpcgpu.worker.forkstart import PRELOAD, ForkServerNanny, fork_started


def _state() -> dict:
    import os

    return {"pid": os.getpid(), "ppid": os.getppid(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "rank": os.environ.get("HPCGPU_LOCAL_RANK"), "new": os.environ.get("HPCGPU_TEST_NEW"),
            "gone": os.environ.get("HPCGPU_TEST_GONE")}


def _by_name(client: Client) -> dict:
    names = {a: w["name"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    return {names[a]: s for a, s in client.run(_state).items()}


def _server() -> int:
    return forkserver._forkserver._forkserver_pid


def _server_environ() -> dict:
    raw = open(f"/proc/{_server()}/environ", "rb").read().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_the_nanny_class_follows_the_configuration():
    class MyNanny(Nanny):
        pass

    assert fork_started(Nanny) is ForkServerNanny and fork_started(MyNanny) is MyNanny
    with dask.config.set({"hpcgpu.local-multiprocessing-method": "spawn"}):
        assert fork_started(Nanny) is Nanny
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        assert fork_started(Nanny) is Nanny  # the user's choice for all of Dask is distributed's
    assert dask.config.get("distributed.worker.multiprocessing-method") == "spawn"


def test_the_fork_server_imports_nothing_of_cuda():
    probe = ("import sys\n"
             "import importlib.util\n"
             f"for m in {list(PRELOAD)!r}:\n"
             "    if importlib.util.find_spec(m):\n"
             "        __import__(m)\n"
             "print([m for m in sys.modules if m.split('.')[0] in "
             "('cupy', 'numba', 'cudf', 'torch', 'dask_cuda', 'ucxx', 'pandas')])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_importing_hpcgpu_leaves_distributed_as_it_is():
    probe = ("from hpcgpu import LocalGPUCluster\nimport distributed.nanny, distributed.process\n"
             "print([hasattr(m.get_mp_context, 'hpcgpu_original') for m in (distributed.nanny, distributed.process)])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[False, False]"


def test_workers_take_the_state_of_the_process_at_their_start(monkeypatch):
    """Pinning per worker, variables set and deleted after the server started, standard
    error as it is at the start, restarts (client.restart, a killed worker) alike."""
    monkeypatch.setenv("HPCGPU_TEST_GONE", "before")
    if _server() is not None and "HPCGPU_TEST_GONE" not in _server_environ():
        forkserver._forkserver._stop()  # one of an earlier test: start one that holds the variable
    with LocalGPUCluster(n_workers=2, gpus=["0", "1"], dashboard_address=None) as cluster, \
            Client(cluster) as client:
        first = _by_name(client)
    assert _server_environ()["HPCGPU_TEST_GONE"] == "before"
    assert {n: (s["gpus"], s["rank"], s["ppid"]) for n, s in first.items()} == \
        {0: ("0,1", "0", _server()), 1: ("1,0", "1", _server())}
    monkeypatch.setenv("HPCGPU_TEST_NEW", "after")
    monkeypatch.delenv("HPCGPU_TEST_GONE")
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            with LocalGPUCluster(n_workers=2, gpus=["0", "1"], dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                client.run(lambda: print("worker stderr", file=sys.stderr, flush=True))
                seen = [_by_name(client)]
                client.restart()
                seen.append(_by_name(client))
                os.kill(seen[-1][1]["pid"], signal.SIGKILL)
                _wait_for_new(client, seen[-1][1]["pid"])
                seen.append(_by_name(client))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        assert err.read().count(b"worker stderr") == 2
    for states in seen:
        assert {n: (s["gpus"], s["rank"], s["ppid"], s["new"], s["gone"]) for n, s in states.items()} == \
            {0: ("0,1", "0", _server(), "after", None), 1: ("1,0", "1", _server(), "after", None)}
    pids = {s["pid"] for states in seen for s in states.values()}
    assert len(pids) == 5  # 2, then 2 new, then 1 new
    assert [pid for pid in pids if not _ends(pid)] == []  # closed: none is left


def test_a_setting_read_at_import_that_changed_spawns_the_worker(monkeypatch):
    """distributed sets its logging up when imported: a worker whose DASK_* settings differ
    from the fork server's is spawned, and so takes them, as before."""

    def level() -> int:
        import logging

        return logging.getLogger("distributed.worker").getEffectiveLevel()

    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        assert [s["ppid"] for s in client.run(_state).values()] == [_server()]
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "error")
    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        assert [s["ppid"] for s in client.run(_state).values()] == [os.getpid()]
        assert list(client.run(level).values()) == [40]


def _wait_for_new(client: Client, dead: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            states = _by_name(client)
        except Exception:  # noqa: BLE001 - the dead worker's address, until the scheduler drops it
            states = {}
        if len(states) == 2 and dead not in {s["pid"] for s in states.values()}:
            return
        time.sleep(0.1)
    raise AssertionError("the killed worker was not started again within 60 s")


def test_a_plain_local_cluster_beside_it_keeps_distributed_s_method():
    """Both clusters start in one event loop at once: only LocalGPUCluster's nannies fork."""

    async def run():
        async with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None, asynchronous=True) as ours, \
                LocalCluster(n_workers=1, dashboard_address=None, asynchronous=True) as plain:
            async with Client(ours, asynchronous=True) as a, Client(plain, asynchronous=True) as b:
                return list((await a.run(_state)).values()), list((await b.run(_state)).values())

    ours, plain = asyncio.run(run())
    assert [s["ppid"] for s in ours] == [_server()]
    assert [s["ppid"] for s in plain] == [os.getpid()]
    assert dask.config.get("distributed.worker.multiprocessing-method") == "spawn"
    assert distributed.nanny.get_mp_context().get_start_method() == "spawn"


SCRIPT = """
import json, os, sys
with open(sys.argv[1], "a") as marks:  # runs again in each worker process, as __mp_main__
    marks.write(f"{__name__} {os.getpid()}\\n")

if __name__ == "__main__":
    from multiprocessing import forkserver
    from distributed import Client
    from hpcgpu import LocalGPUCluster

    with LocalGPUCluster(n_workers=2, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
    print(json.dumps({"workers": pids, "server": forkserver._forkserver._forkserver_pid}))
"""


def test_a_script_imports_its_main_module_again_and_leaves_nothing(tmp_path):
    (tmp_path / "script.py").write_text(textwrap.dedent(SCRIPT))
    marks = tmp_path / "marks"
    done = subprocess.run([sys.executable, "script.py", str(marks)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    pids = json.loads(done.stdout)
    lines = [line.split() for line in marks.read_text().splitlines()]
    assert [name for name, _ in lines].count("__main__") == 1
    assert sorted(int(pid) for name, pid in lines if name == "__mp_main__") == sorted(pids["workers"])
    # they held the script's stderr: all have closed it, and end within moments
    assert [pid for pid in [*pids["workers"], pids["server"]] if not _ends(pid)] == []


def _ends(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:  # ended; its parent is init
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def test_a_python_that_keeps_the_fork_servers_pid_elsewhere_spawns(monkeypatch):
    """forkstart reads multiprocessing's private pid of its fork server: where a Python has
    none, whether the server's environment differs is unknown, and the worker is spawned."""
    from hpcgpu.worker import forkstart

    monkeypatch.setattr(forkserver, "_forkserver", object())
    assert forkstart.spawn_needed(dict(os.environ)) is True
    monkeypatch.setattr(forkserver, "_forkserver", forkserver.ForkServer())
    assert forkstart.spawn_needed(dict(os.environ)) is False  # not started: nothing differs
