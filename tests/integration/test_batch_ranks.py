"""Scripts launched on every rank: ``python -m hpcgpu.mpi`` under mpirun and srun --mpi=pmix,
and ``hpcgpu.GPURunner`` under srun. Real Open MPI, real SLURM, real Dask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from conftest import gpus_per_node, wait_for

from batchtools import CHECK, OMPI_ROOT, ROOT, processes_with

pytestmark = pytest.mark.mpi

APP = ROOT / "examples" / "gpurunner_app.py"
SRUN = ["srun", "--gpus-per-task=1", "--cpus-per-task=1", "--mem=2G", "--time=5",
        "--job-name=hpcgpu-ranks-test"]


def run(argv, tmp_path, timeout=240, **env) -> tuple[subprocess.CompletedProcess, str]:
    marker = uuid.uuid4().hex
    environ = dict(os.environ, **OMPI_ROOT, **env, HPCGPU_TEST_MARKER=marker)
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return done, f"HPCGPU_TEST_MARKER={marker}"


def mpi_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "hpcgpu.mpi", "--dashboard-address", ":0", *args]


def test_mpirun_every_rank_a_gpu_worker_and_the_exit_code(tmp_path):
    """... and the ranks that wait for rank 0 (here while its scheduler starts, held 1.5 s
    by a preload that samples their CPU meanwhile) sleep: MPI_Bcast spun a core each."""
    argv = ["mpirun", "--oversubscribe", "-n", "3",
            *mpi_argv(str(CHECK), "--expect", "3", "--json", "r.json", "--exit-code", "4")]
    done, marker = run(argv, tmp_path, CUDA_VISIBLE_DEVICES="0,1,2",
                       DASK_DISTRIBUTED__SCHEDULER__PRELOAD=str(ROOT / "tests" / "rank_wait_probe.py"),
                       HPCGPU_TEST_RANK_WAIT=str(tmp_path / "wait.json"))
    assert done.returncode == 4, done.stderr[-3000:]
    waited = json.loads((tmp_path / "wait.json").read_text())
    assert len(waited["cpu"]) == 2 and max(waited["cpu"].values()) < 0.1 * waited["hold"], waited
    # a clean end: the workers stop before the scheduler (no CommClosedError tracebacks)
    assert "Traceback" not in done.stderr and "End worker" in done.stderr, done.stderr[-5000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    # 3 ranks, 3 workers: rank 0 (client + scheduler) has a worker on GPU 0 too
    assert sorted(w["cuda_visible_devices"] for w in result["workers"].values()) == ["0", "1", "2"]
    assert sorted(w["local_rank"] for w in result["workers"].values()) == [0, 1, 2]
    # every rank's worker is a GPUWorker (its set-up recorded), not only rank 0's
    assert all("allocator" in w for w in result["workers"].values()), result["workers"]
    assert processes_with(marker) == []


def two_ranks_one_changed(tmp_path, rank: int, export: str, within: float) -> str:
    """``mpirun -n 2 python -m hpcgpu.mpi`` with ``export`` (``NAME=value``) on ``rank`` only:
    it must end non-zero within ``within`` s, and every process of it within 10 s more (rank 0's
    worker, stopped while it started, waited for its death timeout: 60 s). Returns its stderr."""
    only_there = f'[ "$OMPI_COMM_WORLD_RANK" = {rank} ] && export {export}; exec "$@"'
    argv = ["mpirun", "--oversubscribe", "-n", "2", "bash", "-c", only_there, "rank",
            *mpi_argv(str(CHECK), "--expect", "2")]
    start = time.monotonic()
    done, marker = run(argv, tmp_path, timeout=within)
    assert done.returncode != 0 and time.monotonic() - start < within, done.stderr[-3000:]
    wait_for(lambda: processes_with(marker) == [], 10, 0.1, what=f"the processes of {marker} to go")
    return done.stderr


def test_an_error_on_one_rank_during_setup_stops_every_rank(tmp_path):
    """Rank 0 cannot make its TLS certificate (no 'cryptography' there, as on a lent GPU
    machine): every rank must stop with that error. Rank 1 waited in MPI_Bcast and rank 0
    in MPI_Finalize, for ever."""
    blocker = tmp_path / "no-cryptography" / "cryptography"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no cryptography on this rank (test)')\n")
    stderr = two_ranks_one_changed(tmp_path, 0, f"PYTHONPATH={blocker.parent}:$PYTHONPATH", 60)
    assert "hpcgpu.mpi: error on rank 0: TLS needs the 'cryptography' package" in stderr, stderr[-3000:]


def test_a_worker_rank_that_cannot_start_its_worker_stops_every_rank(tmp_path):
    """Rank 1's worker cannot make its local directory (under a file): every rank stops at
    once with its error; rank 0 does not wait wait_for_workers (300 s) for it."""
    stderr = two_ranks_one_changed(tmp_path, 1, "DASK_TEMPORARY_DIRECTORY=/etc/hostname/no_such_dir", 90)
    assert "hpcgpu.mpi: error on rank 1:" in stderr, stderr[-3000:]
    assert "/etc/hostname/no_such_dir" in stderr, stderr[-3000:]


def test_srun_pmix_across_two_nodes(slurm, tmp_path):
    argv = [*SRUN, "--mpi=pmix", "--nodes=2", "--ntasks-per-node=2",
            *mpi_argv(str(CHECK), "--expect", "4", "--json", "r.json")]
    done, marker = run(argv, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    assert processes_with(marker) == []


def test_mpi_init_barrier_holds_across_two_nodes(slurm, tmp_path):
    """No rank leaves MPI_Init before every rank entered it. Slurm's tree fence (its default
    for a fence without data, MPI_Init's closing barrier) has no edges on fewer nodes than
    TreeWidth and did not wait: a rank that left MPI_Init early sent its first message to a
    rank of the other node still in the modex fence, and Open MPI 4.1 called a PML callback
    not yet registered (test_srun_pmix_across_two_nodes segfaulted in MPI_Init; its first
    steps alone: 2 of 487 runs under load). The test cluster runs every fence over the ring
    (mpi.conf, tests/schedulers/slurm/start). Direct modex: the barrier is MPI_Init's only
    fence. Fails without the ring: node 1 enters once node 0 left."""
    environ = {k: v for k, v in os.environ.items() if k != "SLURM_PMIX_FENCE"}  # the cluster's
    environ.update(OMPI_ROOT, OMPI_MCA_pmix_base_async_modex="1", OMPI_MCA_pmix_base_collect_data="0")
    argv = ["srun", "--mpi=pmix", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
            "--mem=1G", "--time=2", "--job-name=hpcgpu-ranks-test", sys.executable,
            str(ROOT / "tests" / "mpi_init_barrier_script.py"), str(tmp_path), "2"]
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["node"] for r in ranks) == [0, 1], done.stdout
    first_out = min(r["leave"] for r in ranks)
    last_in = max(r["enter"] for r in ranks)
    assert first_out >= last_in, (
        f"a rank left MPI_Init {last_in - first_out:.3f} s before the last one entered: {ranks}")


def test_gpurunner_under_srun_keeps_every_gpu_and_the_exit_code(slurm, tmp_path):
    argv = [*SRUN, "--nodes=2", "--ntasks-per-node=2", sys.executable, str(APP),
            "--scheduler-file", str(tmp_path / "s-{job_id}.json"), "--json", "r.json",
            "--exit-code", "5"]
    done, marker = run(argv, tmp_path)
    assert done.returncode == 5, done.stderr[-3000:]
    # a clean end: the workers stop before the scheduler (no CommClosedError tracebacks)
    assert "Traceback" not in done.stderr and "End worker" in done.stderr, done.stderr[-5000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    # which GPUs is SLURM's choice: other jobs may hold GPUs 0 and 1
    assert gpus_per_node(result["places"].values()) == {0: 2, 1: 2}, result
    assert all("allocator" in w for w in result["workers"].values()), result["workers"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # scheduler file, TLS gone
    assert processes_with(marker) == []


def test_gpurunner_ranks_that_share_a_gpu_are_stopped_with_the_reason(slurm, tmp_path):
    """srun -n 2 --gpus=1: both tasks see the one GPU. The ranks cannot compare their GPUs
    before they start (no MPI); get_client() does once the workers joined, before the
    script computes anything (both workers ran on one GPU, silently)."""
    argv = ["srun", "--nodes=1", "--ntasks=2", "--gpus=1", "--cpus-per-task=1", "--mem=2G",
            "--time=5", "--job-name=hpcgpu-ranks-test", sys.executable, str(APP),
            "--scheduler-file", str(tmp_path / "s-{job_id}.json"), "--json", "r.json"]
    done, marker = run(argv, tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "ValueError: workers" in done.stderr and "share GPU" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "r.json").exists()  # the script computed nothing
    assert processes_with(marker) == []
