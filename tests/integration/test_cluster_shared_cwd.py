"""#38's class of break 1 in cluster mode: a cluster created from a shared directory (mode
1777, a project or scratch directory). SLURM and Grid Engine start its jobs there, and a
``python -m`` line puts that directory first on ``sys.path``: an ``lz4.py`` that ``nobody``
put there (distributed's compression tries ``lz4``) ran as the cluster's user in the job's
worker and scheduler. The planted module leaves a marker; none may appear, and the workers
still join. (PBS starts jobs in the user's home directory; LSF's is the shim on SLURM.)
dask-jobqueue's CPU jobs too: their worker line, and the worker process its nanny spawns
(``python -c``, whose first import is ``multiprocessing``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from attacker import as_nobody, can_act_as_nobody
from cluster_helpers import FAST
from hpcgpu import SGECluster, SLURMCluster

#: writes ``ran-<pid>`` (its command line) beside itself, then fails as a missing lz4 would
PLANTED = ("import os, sys\n"
           "open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ran-%d' % os.getpid()), 'w')"
           ".write(' '.join(sys.argv))\n"
           "raise ImportError('planted')\n")


@pytest.fixture
def shared(monkeypatch):
    """A 1777 directory holding nobody's ``lz4.py``, as this test's working directory."""
    if not can_act_as_nobody():
        pytest.fail("needs root on Linux: the module is planted as nobody")
    base = Path(tempfile.mkdtemp(prefix="hpcgpu-shared-cwd-", dir="/tmp"))
    os.chmod(base, 0o755)  # pytest's own tmp_path is root's alone: nobody could not plant
    where = base / "scratch"
    where.mkdir()
    os.chmod(where, 0o1777)
    as_nobody((where / "lz4.py").write_text, PLANTED)
    monkeypatch.chdir(where)
    yield where
    shutil.rmtree(base, ignore_errors=True)


def check_no_planted_module_runs(cluster, where: Path, gpus: bool = True) -> None:
    assert str(where) not in cluster.job_script()  # the job starts there by the scheduler's default
    cluster.scale(**{"gpus" if gpus else "n": 1})
    try:
        cluster.wait_for_workers(**{"gpus" if gpus else "n_workers": 1}, timeout=120)
    finally:
        ran = {p.name: p.read_text() for p in where.glob("ran-*")}
        assert ran == {}, f"the planted lz4.py ran as {os.getuid()} in the job: {ran}"


@pytest.mark.slurm
def test_slurm_jobs_from_a_shared_directory_import_nothing_from_it(slurm, clusters, shared):
    check_no_planted_module_runs(clusters(SLURMCluster, **FAST, gpus_per_node=1), shared)


@pytest.mark.sge
def test_sge_jobs_and_their_scheduler_import_nothing_from_a_shared_directory(sge, clusters, shared):
    cluster = clusters(SGECluster, **FAST, gpus_per_node=1, scheduler_in_job=True)
    check_no_planted_module_runs(cluster, shared)


@pytest.mark.slurm
def test_slurm_cpu_jobs_from_a_shared_directory_import_nothing_from_it(slurm, clusters, shared):
    as_nobody((shared / "multiprocessing.py").write_text, PLANTED)  # the nanny's spawned process
    cluster = clusters(SLURMCluster, queue="debug", cores=1, memory="1GB", **FAST)
    assert "distributed.cli.dask_worker" in cluster.job_script()  # dask-jobqueue's CPU job
    check_no_planted_module_runs(cluster, shared, gpus=False)
