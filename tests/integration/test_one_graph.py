"""One graph in every mode: the tasks that run do not depend on where the scheduler lives.

Dask runs a collection's optimiser where the graph is materialised, on the scheduler; these
tests run one hpcgpu.array expression with the scheduler in the client's process, in a
process of its own (``dask scheduler``, as ``scheduler_in_job`` has it), under ``hpcgpu run``
and under ``hpcgpu.mpi``, and compare the tasks that ran, with the default settings and with
``fuse-width`` set in the client (tests/one_graph_script.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from batchtools import processes_with
from conftest import wait_for

HERE = Path(__file__).resolve().parent.parent
SCRIPT = HERE / "one_graph_script.py"
ROOT_MPI = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict:
    """The reference: scheduler, client and two one-thread workers in this process."""
    from one_graph_script import record

    out = tmp_path_factory.mktemp("one-graph") / "in-process.json"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        record(client, str(out))
    return json.loads(out.read_text())


def same_graph(got: dict, reference: dict) -> None:
    assert got["workers"] == 2, got
    for setting in ("default", "width 8"):
        assert got[setting] == reference[setting], (setting, got[setting], reference[setting])
    # the passes ran, and the client's fuse-width reached the optimiser
    assert reference["default"]["tasks"] < 60 < reference["width 8"]["tasks"] < 300, reference


def test_a_scheduler_in_its_own_process_runs_the_clients_graph(in_process, tmp_path):
    port_file = tmp_path / "scheduler.json"
    common = dict(env=dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False"), cwd=tmp_path,
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(port_file)], **common)
    workers = None
    try:
        wait_for(lambda: port_file.exists() and port_file.stat().st_size, 60, what="scheduler file")
        address = json.loads(port_file.read_text())["address"]
        # hpcgpu's worker, as in a job: both workers forked from one server (one interpreter
        # start-up for the two, where dask worker --nworkers 2 spawns two more)
        workers = subprocess.Popen([sys.executable, "-m", "hpcgpu.worker", address, "--gpus-per-node", "2",
                                    "--nthreads", "1", "--no-dashboard"],
                                   **{**common, "env": dict(common["env"], CUDA_VISIBLE_DEVICES="0,1")})
        done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out.json"), address], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        for process in (workers, scheduler):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
    same_graph(json.loads((tmp_path / "out.json").read_text()), in_process)


def test_hpcgpu_run_runs_the_clients_graph(in_process, tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1")
    done = subprocess.run([sys.executable, "-m", "hpcgpu", "run", "--dashboard-address", ":0", "--grace", "5",
                           str(SCRIPT), str(tmp_path / "out.json")],
                          env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    same_graph(json.loads((tmp_path / "out.json").read_text()), in_process)


def test_hpcgpu_mpi_runs_the_clients_graph(in_process, tmp_path):
    marker = f"{os.getpid()}-{tmp_path.name}"
    env = dict(os.environ, **ROOT_MPI, CUDA_VISIBLE_DEVICES="0,1", HPCGPU_TEST_MARKER=marker)
    done = subprocess.run(["mpirun", "--oversubscribe", "-n", "2", sys.executable, "-m", "hpcgpu.mpi",
                           "--dashboard-address", ":0", str(SCRIPT), str(tmp_path / "out.json")],
                          env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    same_graph(json.loads((tmp_path / "out.json").read_text()), in_process)
    assert processes_with(f"HPCGPU_TEST_MARKER={marker}") == []
