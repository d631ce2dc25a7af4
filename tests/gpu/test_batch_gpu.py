"""Batch-mode layouts on real GPUs (marked ``gpu``: the lead runs them on a lent GPU machine).

Each worker must hold its own CUDA device (NVML UUID, registered by the worker preload),
whatever the layout: every GPU of the node per rank, one GPU bound to each rank, or a
task that takes every GPU it sees (``--gpus-per-node all``, nodes with different counts).
Two ranks on one GPU must be refused before any worker starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from batchtools import CHECK, OMPI_ROOT

pytestmark = pytest.mark.gpu


def gpu_count() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    n = sum(line.startswith("GPU ") for line in out.splitlines())
    if n < 2:
        pytest.skip(f"needs 2 GPUs or more, this machine has {n}")
    return n


def mpi(n: int, tmp_path, *prefix: str, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = ["mpirun", "-n", str(n), "--bind-to", "none", *prefix, sys.executable, "-m",
            "hpcgpu.mpi", "--dashboard-address", ":0", str(CHECK), "--expect", str(n),
            "--json", "r.json"]
    return subprocess.run(argv, env={**os.environ, **OMPI_ROOT, **(env or {})}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def uuids(tmp_path) -> list[str]:
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    return [w["uuid"] for w in result["workers"].values()]


def test_ranks_with_one_bound_gpu_each_get_distinct_devices(tmp_path):
    gpu_count()
    # as srun --gpus-per-task=1 does: each rank sees only its own GPU
    bind = ["bash", "-c", 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"', "bind"]
    done = mpi(2, tmp_path, *bind)
    assert done.returncode == 0, done.stderr[-3000:]
    found = uuids(tmp_path)
    assert len(found) == 2 and len(set(found)) == 2 and all(found), found


def test_two_ranks_on_one_gpu_are_refused_before_anything_starts(tmp_path):
    gpu_count()
    bind = ["bash", "-c", 'CUDA_VISIBLE_DEVICES=0 exec "$@"', "bind"]
    done = mpi(2, tmp_path, *bind)
    assert done.returncode == 1 and "would share GPU" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "r.json").exists()


def test_more_ranks_than_gpus_are_refused(tmp_path):
    n = gpu_count()
    done = mpi(2 * n, tmp_path, "--oversubscribe")
    assert done.returncode == 1 and "two workers would share a GPU" in done.stderr, done.stderr[-3000:]


def test_a_task_takes_every_gpu_it_sees():
    n = gpu_count()
    # nodes with different GPU counts (-N2 --gpus=3): each node's task starts what it sees
    import importlib.util

    from distributed import Client, LocalCluster

    spec = importlib.util.spec_from_file_location("check_gpu_workers", CHECK)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    visible = ",".join(str(i) for i in range(1, n))  # all but GPU 0
    with LocalCluster(n_workers=0, dashboard_address=None) as cluster, Client(cluster) as client:
        worker = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--gpus-per-node", "all"],
            env={**os.environ, "CUDA_VISIBLE_DEVICES": visible})
        try:
            client.wait_for_workers(n - 1, timeout=180)
            found = {name: w["uuid"] for name, w in check.gpu_workers(client).items()}
        finally:
            worker.terminate()
            worker.wait(60)
    assert len(found) == n - 1 and len(set(found.values())) == n - 1 and all(found.values()), found
