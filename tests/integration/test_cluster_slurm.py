"""Cluster mode on the real local SLURM (4 fake nodes x 4 fake GPUs)."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import dask
import pytest
from distributed import Client
from distributed.security import Security

from cluster_helpers import (FAST, check_adapt, check_failing_job_reported, check_scale_up_and_down, gpu_placement,
                             slurm_alive)
from conftest import wait_for
from hpcgpu import SLURMCluster

pytestmark = pytest.mark.slurm


@pytest.fixture
def make(slurm, clusters):
    return lambda **options: clusters(SLURMCluster, **{**FAST, **options})


def test_scale_gpus_8_then_4_retires_one_whole_job(make):
    cluster = make(gpus_per_node=4)
    check_scale_up_and_down(cluster, gpus_per_job=4, jobs=2, job_alive=slurm_alive)
    # SLURM's own node assignment; one srun task per node gave each nanny one of its GPUs
    assert all(job.nodes for job in cluster.jobs)


def test_one_task_per_gpu_lets_srun_bind_each_gpu(make):
    cluster = make(gpus_per_node=2, one_task_per="gpu")
    script = cluster.job_script()
    assert "--ntasks-per-node=2 --cpus-per-task=1 --gpus-per-task=1" in script
    assert "--gpus-per-node 2" not in script
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=2, timeout=120)
    with Client(cluster) as client:
        placement = gpu_placement(client)
    # one GPU each, distinct; which ones is SLURM's choice (other jobs may hold GPUs 0 and 1)
    devices = [p["cuda_visible_devices"] for p in placement.values()]
    assert len(set(devices)) == 2 and all(d.isdigit() for d in devices), devices
    assert sorted(placement) == [f"{cluster.jobs[0].name}-0-{g}" for g in range(2)]


def test_adapt_from_zero_and_back(make):
    cluster = make(gpus_per_node=2)
    check_adapt(cluster, gpus_per_job=2, max_jobs=2)


def test_scale_rounds_gpus_up_to_whole_jobs_and_says_so(make):
    cluster = make(gpus_per_node=4)
    with pytest.warns(UserWarning, match=r"scale\(gpus=5\) rounds up to 2 job\(s\) = 8 GPUs"):
        cluster.scale(gpus=5)
    assert len(cluster.worker_spec) == 2
    cluster.scale(jobs=0)
    assert not cluster.worker_spec


def test_dead_job_is_dropped_and_replaced_under_adapt(make):
    """dask/distributed#9102: a job whose workers all died must leave worker_spec, or adapt
    believes its plan is met and never replaces it."""
    cluster = make(gpus_per_node=2)
    cluster.adapt(minimum_jobs=1, maximum_jobs=1, interval="300ms")
    cluster.wait_for_workers(gpus=2, timeout=120)
    (first,) = cluster.jobs
    subprocess.run(["scancel", first.job_id], check=True)  # as if the walltime ran out
    wait_for(lambda: first.name not in cluster.worker_spec, 30, what="the dead job to be dropped")
    wait_for(lambda: len(cluster.jobs) == 2 and cluster.jobs[1].job_id, 30,
             what="a replacement job")
    cluster.wait_for_workers(gpus=2, timeout=120)
    assert {j.name for j in cluster.jobs if j.workers} == {cluster.jobs[1].name}


def test_job_failing_at_start_is_reported_with_its_stderr(make):
    cluster = make(gpus_per_node=1, python="/nonexistent/bin/python3", max_failed_jobs=2)
    text = check_failing_job_reported(cluster, within=60)
    assert "exit code" in text
    # the job script's own check says what to do (#43)
    assert "/nonexistent/bin/python3 (not found) on node" in text, text
    assert "has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=" in text
    # it failed at once: a replacement would fail the same way, so none is submitted
    # (max_failed_jobs=2 counts failures of jobs that ran: tests/unit/test_cluster_parts.py)
    assert len(cluster.failures) == 1 and "not submitting more" not in text
    time.sleep(2)
    assert len(cluster.jobs) == 1
    assert not cluster.worker_spec
    assert all(j.state == "failed" and j.exit_code not in (None, 0) for j in cluster.jobs)


def test_job_whose_worker_fails_in_its_setup_is_reported_with_the_workers_own_error(make, tmp_path):
    """One of a job's two workers fails while it starts (an exception in a preload, as an
    RMM pool that does not fit would): the job ends, and waiting for it fails within
    seconds with the worker's own exception line."""
    (tmp_path / "second_gpu_fails.py").write_text(
        "import os\n"
        "if os.environ.get('HPCGPU_LOCAL_RANK') == '1':\n"
        "    raise MemoryError('no room for the pool on this GPU (test)')\n")
    cluster = make(gpus_per_node=2, max_failed_jobs=1,
                   job_script_prologue=[f"export PYTHONPATH={tmp_path}:$PYTHONPATH"],
                   worker_extra_args=["--preload", "second_gpu_fails"])
    start = time.monotonic()
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match="ended before their workers connected") as error:
        cluster.wait_for_workers(gpus=2, timeout=120)
    assert time.monotonic() - start < 60  # queueing and Python starting; the timeout is 120
    assert "MemoryError: no room for the pool on this GPU (test)" in str(error.value)
    # its first worker had connected for a moment: still a failure to start, so that
    # max_failed_jobs=1 stops the replacements (it submitted 7 jobs in 16 s before)
    time.sleep(3)
    assert [j.state for j in cluster.jobs] == ["failed"], cluster.job_table()


def test_tls_refuses_a_client_without_the_certificate(make):
    cluster = make(gpus_per_node=1)
    assert cluster.scheduler_address.startswith("tls://")
    with pytest.raises((OSError, TimeoutError)):
        Client(cluster.scheduler_address.replace("tls://", "tcp://"), timeout="3s")
    with pytest.raises((OSError, TimeoutError)):
        Client(cluster.scheduler_address, security=Security.temporary(), timeout="3s")
    with cluster.get_client() as client:  # the cluster's own certificate works
        assert client.scheduler_info()["address"] == cluster.scheduler_address
    # The temporary key: in the cluster's private directory only, never dask-jobqueue's
    # files in the log directory (docs/security.md).
    assert "PRIVATE KEY" in cluster.security.tls_worker_key
    assert not [p for p in os.listdir(cluster._log_directory) if "dask-jobqueue" in p]
    assert stat.S_IMODE(os.stat(cluster.private_directory.made).st_mode) == 0o700
    dashboard = cluster.scheduler.http_server.port
    assert dashboard and cluster.dashboard_link.startswith("http://")


def test_security_false_warns_and_uses_tcp(make):
    with pytest.warns(UserWarning, match="without TLS"):
        cluster = make(gpus_per_node=1, security=False)
    assert cluster.scheduler_address.startswith("tcp://")
    assert "--tls" not in cluster.job_script()


def test_bad_input_raises_before_anything_is_submitted(slurm, tmp_path):
    with pytest.raises(ValueError, match="gpus_per_node=5 is more than the 4 GPUs"):
        SLURMCluster(profile="local-gpu", gpus_per_node=5, log_directory=str(tmp_path))
    with pytest.raises(ValueError, match="did you mean 'gpus_per_node'|unknown option"):
        SLURMCluster(gpus_per_nod=4, log_directory=str(tmp_path))
    with pytest.raises(ValueError, match="launcher='direct' starts workers on one node"):
        SLURMCluster(nodes=2, launcher="direct", log_directory=str(tmp_path))


def test_profile_and_config_reach_the_rendered_script(make):
    with dask.config.set({"hpcgpu.slurm.walltime": "00:07:00",
                          "jobqueue.slurm.job-script-prologue": ["echo from-jobqueue"]}):
        cluster = make(profile="local-gpu", gpus_per_node=4, walltime=None)
    script = cluster.job_script()
    assert "#SBATCH --gres=gpu:h100:4" in script and "#SBATCH --partition=gpu" in script
    assert "#SBATCH --time=00:07:00" in script and "echo from-jobqueue" in script
    assert "--mem=8G" in script  # the profile's memory_per_gpu=2GiB x 4
