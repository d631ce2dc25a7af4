"""No process that hpcgpu starts imports from the working directory (#38's class: a shared
directory). ``python -m`` puts the working directory first on ``sys.path``; a batch job runs
where it was submitted, often a shared scratch directory, and a ``lz4.py`` that another user
put there ran as the user in ``hpcgpu run``'s scheduler and worker (seen as root, with the
file nobody's). The user's own script is not hpcgpu's to change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcgpu.system.pymain import CHILDREN_DROP_CWD, DROP_CWD, SAFE_MAIN_AND_CHILDREN, code_argv, module_argv

PLANTED = "import os, sys\nopen(os.environ['MARKER'] + '-%d' % os.getpid(), 'w').write(' '.join(sys.argv))\n"


def plant(where: Path, name: str, marker: Path) -> dict:
    (where / name).write_text(PLANTED + "raise ImportError('planted')\n")
    return dict(os.environ, MARKER=str(marker))


def test_a_module_runs_as_with_m_but_never_from_the_working_directory(tmp_path):
    (tmp_path / "hpcgpu").mkdir()
    env = plant(tmp_path / "hpcgpu", "__init__.py", tmp_path / "ran")
    argv = [sys.executable, "-m", "hpcgpu.system.pymain"]
    subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert list(tmp_path.glob("ran-*")), "plain -m imported the planted package (so this can fail)"
    for ran in tmp_path.glob("ran-*"):
        ran.unlink()
    done = subprocess.run(module_argv(argv), cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not list(tmp_path.glob("ran-*")), done.stderr
    shown = subprocess.run(module_argv([sys.executable, "-m", "json.tool"]), input='{"a": 1}',
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert shown.stdout.split() == ["{", '"a":', "1", "}"], shown.stderr  # argv, stdin: as -m


def test_hpcgpu_runs_processes_import_nothing_from_the_jobs_directory(tmp_path):
    work = tmp_path / "shared"
    work.mkdir()
    env = plant(work, "lz4.py", tmp_path / "ran")  # distributed's compression tries lz4
    (tmp_path / "script.py").write_text(
        "import hpcgpu\nprint('sum', hpcgpu.get_client().submit(sum, [1, 2]).result())\n")
    env.update(CUDA_VISIBLE_DEVICES="0", XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run(module_argv([sys.executable, "-m", "hpcgpu", "run", "--dashboard-address", "",
                                       "--timeout", "120", str(tmp_path / "script.py")]),
                          cwd=work, env=env, capture_output=True, text=True, timeout=180)
    assert "sum 3" in done.stdout, done.stderr[-3000:]
    assert [p.read_text() for p in tmp_path.glob("ran-*")] == []  # before: the scheduler's, the worker's


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_nannys_new_interpreters_import_nothing_from_the_jobs_directory(tmp_path, method):
    """Under UCX (or by choice) the nannies start worker processes with multiprocessing's
    spawn or forkserver, ``python -c CODE`` in the job's directory: their first import,
    ``multiprocessing``, came from there (before: the workers never joined)."""
    from distributed import Client, LocalCluster

    from hpcgpu.jobspec.worker_command import WorkerCommand

    (tmp_path / "multiprocessing").mkdir()
    env = plant(tmp_path / "multiprocessing", "__init__.py", tmp_path / "ran")
    plant(tmp_path, "lz4.py", tmp_path / "ran")
    env.update(CUDA_VISIBLE_DEVICES="0,1")
    with LocalCluster(n_workers=0, dashboard_address=":0", protocol="tcp") as cluster, Client(cluster) as client:
        argv = WorkerCommand(scheduler=cluster.scheduler_address, gpus_per_node=2, death_timeout=30).argv(
            sys.executable) + ["--multiprocessing-method", method, "--no-dashboard"]
        worker = subprocess.Popen(argv, cwd=tmp_path, env=env)
        try:
            client.wait_for_workers(2, timeout=60)
        finally:
            worker.terminate()
            worker.wait(60)
    assert [p.read_text() for p in tmp_path.glob("ran-*")] == []


@given(st.lists(st.sampled_from(["-c", "-B", "--fork", "x", "import m", DROP_CWD, DROP_CWD + ";pass"]), max_size=6))
def test_the_inline_rewrite_is_code_argv(argv):
    """CHILDREN_DROP_CWD (the standard library alone, for dask-jobqueue's CPU workers) gives
    multiprocessing's children the argv that children_drop_cwd gives them."""
    from multiprocessing import util

    seen = []
    original = util.spawnv_passfds
    util.spawnv_passfds = lambda path, args, passfds: seen.append(args)
    try:
        exec(CHILDREN_DROP_CWD, {})
        util.spawnv_passfds("py", ["py", *argv], ())
    finally:
        util.spawnv_passfds = original
    assert seen == [code_argv(["py", *argv])]


def test_dask_jobqueues_worker_line_imports_nothing_from_the_jobs_directory(tmp_path):
    """A CPU job's worker, ``python -c SAFE_MAIN_AND_CHILDREN distributed.cli.dask_worker``
    (hpcgpu.cluster.batch.cpu_job), with its nanny's spawned worker process: neither imports
    from the job's directory, where ``python -m`` and the spawn's ``python -c`` did."""
    from distributed import Client, LocalCluster

    (tmp_path / "multiprocessing").mkdir()
    env = plant(tmp_path / "multiprocessing", "__init__.py", tmp_path / "ran")
    plant(tmp_path, "lz4.py", tmp_path / "ran")
    with LocalCluster(n_workers=0, dashboard_address=":0", protocol="tcp") as cluster, Client(cluster) as client:
        argv = [sys.executable, "-c", SAFE_MAIN_AND_CHILDREN, "distributed.cli.dask_worker",
                cluster.scheduler_address, "--nanny", "--nthreads", "1", "--no-dashboard", "--death-timeout", "30"]
        worker = subprocess.Popen(argv, cwd=tmp_path, env=env)
        try:
            client.wait_for_workers(1, timeout=60)
        finally:
            worker.terminate()
            worker.wait(60)
    assert [p.read_text() for p in tmp_path.glob("ran-*")] == []
