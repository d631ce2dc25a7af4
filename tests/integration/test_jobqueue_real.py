"""dask-jobqueue-style CPU workers on the real local SLURM and Grid Engine.

The arguments are what a dask-jobqueue user writes (cores, processes, memory); the jobs are
dask-jobqueue's scripts, submitted and watched by hpcgpu: TLS on, whole jobs retired
together, a job that fails at start reported with its own error.
"""

from __future__ import annotations

import subprocess

import pytest
from distributed import Client

from cluster_helpers import check_adapt, check_failing_job_reported, sge_alive, slurm_alive
from conftest import wait_for
from hpcgpu import SGECluster, SLURMCluster
from hpcgpu.system.workers import scheduler_workers

CPU = dict(cores=2, processes=2, memory="2GB", walltime="00:10:00", death_timeout=60,
           poll_interval=0.5, scheduler_options={"dashboard_address": "localhost:0"})


def check_cpu_scale_up_and_down(cluster, job_alive) -> None:
    """Two jobs of two CPU workers connect over TLS and compute; scale(2) retires one whole
    job (both its workers), and that job leaves the scheduler."""
    cluster.scale(4)  # 4 workers = 2 jobs of processes=2
    assert len(cluster.worker_spec) == 2
    cluster.wait_for_workers(4, timeout=240)
    with Client(cluster) as client:
        info = scheduler_workers(client)
        assert all(address.startswith("tls://") for address in info)
        names = sorted(str(w["name"]) for w in info.values())
        jobs = sorted(job.name for job in cluster.jobs)
        assert names == sorted(f"{job}-{i}" for job in jobs for i in range(2))
        assert {w["nthreads"] for w in info.values()} == {1}
        futures = client.map(lambda x: x * x, range(100))
        assert client.submit(sum, futures).result() == sum(x * x for x in range(100))
        del futures
        ids = {job.name: job.job_id for job in cluster.jobs}
        cluster.scale(2)
        wait_for(lambda: len(scheduler_workers(client)) == 2, 120,
                 what="one job's two workers to remain")
        left = {cluster.job_key(w["name"]) for w in scheduler_workers(client).values()}
        assert len(left) == 1
        (gone,) = [job_id for name, job_id in ids.items() if name not in left]
        wait_for(lambda: not job_alive(gone), 120, what=f"job {gone} to leave the scheduler")


@pytest.mark.slurm
def test_slurm_cpu_workers(slurm, clusters):
    cluster = clusters(SLURMCluster, queue="debug", **CPU)
    assert "#SBATCH -n 1" in cluster.job_header and "--nworkers 2" in cluster.job_script()
    check_cpu_scale_up_and_down(cluster, slurm_alive)


@pytest.mark.slurm
def test_slurm_worker_names_expand_the_jobs_variables(slurm, clusters):
    """dask-jobqueue's ``test_worker_name_uses_cluster_name``: ``$NAME`` in ``name`` is the
    job's shell's to expand (a job array's users name workers after its variables)."""
    cluster = clusters(SLURMCluster, queue="debug", name="test-$MY_ENV_VARIABLE",
                       job_script_prologue=["MY_ENV_VARIABLE=my-env-variable-value"],
                       **dict(CPU, processes=1, cores=1))
    cluster.scale(jobs=2)
    cluster.wait_for_workers(2, timeout=240)
    with Client(cluster) as client:
        names = sorted(str(w["name"]) for w in scheduler_workers(client).values())
    assert names == ["test-my-env-variable-value-0", "test-my-env-variable-value-1"]


@pytest.mark.slurm
def test_slurm_cpu_adapt_in_whole_jobs(slurm, clusters):
    cluster = clusters(SLURMCluster, queue="debug", **CPU)
    check_adapt(cluster, gpus_per_job=2, max_jobs=2)


@pytest.mark.slurm
def test_slurm_cpu_job_failing_at_start_is_reported(slurm, clusters):
    cluster = clusters(SLURMCluster, queue="debug", python="/nonexistent/bin/python3",
                       max_failed_jobs=1, **CPU)
    message = check_failing_job_reported(cluster, within=120)
    assert "No such file or directory" in message


@pytest.mark.sge
def test_sge_cpu_workers(sge, clusters):
    cluster = clusters(SGECluster, job_extra_directives=["-pe smp 2"], **CPU)
    assert "#$ -pe smp 2" in cluster.job_header and "#$ -l h_rt=00:10:00" in cluster.job_header
    check_cpu_scale_up_and_down(cluster, sge_alive)


@pytest.mark.slurm
@pytest.mark.parametrize("form", ["argument", "options"])
def test_slurmrunner_script_runs_with_one_import_changed(form, slurm, tmp_path):
    import json
    import os
    import sys
    from pathlib import Path

    app = Path(__file__).parents[1] / "jobqueue_runner_app.py"
    template = str(tmp_path / "scheduler-{job_id}.json")
    argv = ["srun", "-n", "3", "--gpus-per-task=1", "--cpus-per-task=1", "--mem=1G",
            "--time=5", "--job-name=hpcgpu-jq-runner", sys.executable, str(app), template,
            str(tmp_path / "out.json"), form]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out.json").read_text())
    # every rank is a worker (rank 0 also runs the scheduler and the script), over TLS
    assert result["result"] == 11 and result["workers"] == result["n_workers"] == 3
    assert result["address"].startswith("tls://")
    used = Path(result["scheduler_file"])
    assert used.parent == tmp_path and used.name.startswith("scheduler-")  # the one asked for
    assert "{job_id}" not in result["scheduler_file"]


@pytest.mark.slurm
@pytest.mark.parametrize("scheduler", ["lsf"])  # PBS: the real OpenPBS, test_cluster_pbs.py
def test_pbs_and_lsf_cpu_workers_through_the_shims(scheduler, slurm, monkeypatch, clusters):
    """dask-jobqueue's #PBS/#BSUB scripts through tests/shims (run under SLURM, directives
    translated, unknown ones refused): what a real PBS/LSF would do is not verified here.

    monkeypatch before clusters: its PATH is undone only after the clusters have closed, so
    their status polls and cancels reach the shims (not a missing bjobs or SGE's qdel)."""
    import os
    from pathlib import Path

    from hpcgpu import LSFCluster, PBSCluster

    shims = Path(__file__).parents[1] / "shims" / scheduler
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    options = dict(CPU, walltime="00:10", lsf_units="mb") if scheduler == "lsf" else CPU
    cluster = clusters(PBSCluster if scheduler == "pbs" else LSFCluster, **options)
    check_cpu_scale_up_and_down(cluster, slurm_alive)


@pytest.mark.slurm
@pytest.mark.parametrize("scheduler", ["lsf"])  # PBS: the real OpenPBS, test_cluster_pbs.py
def test_pbs_and_lsf_cpu_job_failing_at_start_is_reported(scheduler, slurm, monkeypatch,
                                                         clusters):
    """The stderr file is found where dask-jobqueue's directives put it (LSF
    <worker name>-<id>.err)."""
    import os
    from pathlib import Path

    from hpcgpu import LSFCluster, PBSCluster

    shims = Path(__file__).parents[1] / "shims" / scheduler
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    options = dict(CPU, walltime="00:10", lsf_units="mb") if scheduler == "lsf" else CPU
    cluster = clusters(PBSCluster if scheduler == "pbs" else LSFCluster,
                       python="/nonexistent/bin/python3", max_failed_jobs=1, **options)
    message = check_failing_job_reported(cluster, within=120)
    assert "No such file or directory" in message
