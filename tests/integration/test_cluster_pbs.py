"""PBSCluster against the real OpenPBS 23.06.06 (tests/schedulers/pbs/start): 2 vnodes of
4 fake GPUs (``ngpus``), ``CUDA_VISIBLE_DEVICES`` set by a mom hook, PBS's own commands
first on PATH (Grid Engine's qsub/qstat/qdel are installed on the same host)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from array_helpers import check_scale_up_one_array_then_down
from conftest import wait_for
from cluster_helpers import (FAST, check_adapt, check_failing_job_reported,
                             check_scale_up_and_down, gpu_placement, pbs_alive)
from distributed import Client
from hpcgpu import PBSCluster
from test_jobqueue_real import CPU, check_cpu_scale_up_and_down

pytestmark = pytest.mark.pbs


@pytest.fixture
def make(pbs, clusters):  # pbs first: PATH is undone after the clusters closed
    def make(**options):
        return clusters(PBSCluster, **{**FAST, **options})
    return make


def test_one_gpu_job_as_a_new_user_writes_it(make):
    """The issue's case: PBSCluster(gpus_per_node=1) and scale(jobs=1), nothing else said.
    Its worker connects on the GPU PBS's hook gave the job."""
    cluster = make(gpus_per_node=1)
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=1, timeout=90)
    (job,) = cluster.jobs
    assert job.job_id.endswith(".vm-pbs") or "." in job.job_id
    with Client(cluster) as client:
        (place,) = gpu_placement(client).values()
        assert place["cuda_visible_devices"] in "0123" and place["job_id"] == job.job_id
        assert client.submit(lambda: 6 * 7).result() == 42
    qstat = subprocess.run(["qstat", "-f", job.job_id], capture_output=True, text=True).stdout
    assert "Resource_List.ngpus = 1" in qstat and "exec_vnode = (pbsnode" in qstat


def test_job_failing_at_once_is_reported_after_the_first_with_its_own_words(make):
    """A launcher this host's mpiexec (Open MPI's) does not take: the job exits 1 at once.
    Waiting fails after that one job, naming mpiexec's error and PBS's own comment."""
    cluster = make(gpus_per_node=1, launcher="mpiexec")
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match="ended before their workers connected") as error:
        cluster.wait_for_workers(gpus=1, timeout=90)
    text = str(error.value)
    assert 'mpiexec: Error: unknown option "--ppn"' in text, text
    assert "and failed" in text, text  # PBS's comment: "Job run at ... on (pbsnode1:...) and failed"
    assert len(cluster.jobs) == 1 and len(cluster.failures) == 1, cluster.job_table()
    (job,) = cluster.jobs
    assert job.state == "failed" and job.exit_code == 1


def test_scale_up_and_down_in_whole_jobs(make):
    cluster = make(gpus_per_node=2)
    assert "#PBS -l select=1:ncpus=2:ngpus=2" in cluster.job_script()
    check_scale_up_and_down(cluster, gpus_per_job=2, jobs=2, job_alive=pbs_alive)


def test_adapt(make):
    check_adapt(make(gpus_per_node=2), gpus_per_job=2, max_jobs=2)


def test_failing_job_reported_with_its_stderr(make):
    """The job script's python check ends it (exit 2), saying what to do (#43); its words
    are read from PBS's own output file (``<job id>.OU``)."""
    cluster = make(gpus_per_node=1, python="/nonexistent/bin/python3")
    text = check_failing_job_reported(cluster, within=60)
    (job,) = cluster.jobs
    assert job.state == "failed" and job.exit_code == 2
    assert job.job_id + ".OU" in text
    assert "/nonexistent/bin/python3 (not found) on " in job.stderr_tail
    assert "name theirs with python=" in job.stderr_tail


def test_scale_up_is_one_array_then_elements_retire(make):
    """scale(gpus=4) of one-GPU jobs: one ``qsub -J``, four elements ``N[i].server``."""

    def array_of(job_id: str) -> str | None:
        out = subprocess.run(["qstat", "-x", "-f", "-F", "json", job_id], capture_output=True,
                             text=True).stdout
        return json.loads(out or "{}").get("Jobs", {}).get(job_id, {}).get("array_id")

    check_scale_up_one_array_then_down(make(gpus_per_node=1), "pbs", "qsub", gpus=4, keep=2,
                                       array_of=array_of)


def test_cpu_workers_in_dask_jobqueue_jobs(make):
    """dask-jobqueue's own PBSJob script (cores, processes, memory) on the real server."""
    cluster = make(**CPU)
    assert "#PBS -l select=1:ncpus=2:mem=1908MB" in cluster.job_header  # dask-jobqueue's 2GB
    check_cpu_scale_up_and_down(cluster, pbs_alive)


def test_cpu_job_failing_at_start_is_reported(make):
    """Its stderr is read where dask-jobqueue's ``-e dir/`` puts it: ``<job id>.ER``."""
    cluster = make(**CPU, python="/nonexistent/bin/python3")
    message = check_failing_job_reported(cluster, within=60)
    assert "No such file or directory" in message and ".ER" in message, message


def test_qdel_by_hand_is_seen_dropped_and_replaced(make):
    """qdel of a running job (OpenPBS here records Exit_status 0 for it): the cluster sees
    it cancelled, drops it and adapt replaces it; scale(jobs=0) qdels the replacement."""
    cluster = make(gpus_per_node=1)
    cluster.adapt(minimum_jobs=1, maximum_jobs=1, interval="300ms")
    cluster.wait_for_workers(gpus=1, timeout=90)
    (first,) = cluster.jobs
    assert first.state == "running" and first.nodes == ("vm-pbs",)
    subprocess.run(["qdel", first.job_id], check=True)
    wait_for(lambda: first.name not in cluster.worker_spec, 30, what="the deleted job dropped")
    wait_for(lambda: len(cluster.jobs) == 2 and cluster.jobs[1].job_id, 30, what="a replacement")
    assert cluster.jobs[0].state == "cancelled", cluster.job_table()
    assert f"job {first.name} (id {first.job_id}) ended while its workers were connected" in (
        " ".join(cluster.events))
    cluster.wait_for_workers(gpus=1, timeout=90)
    second = cluster.jobs[1]
    cluster.scale(jobs=0)  # stops adapt too
    wait_for(lambda: not pbs_alive(second.job_id), 60, what="the replacement qdel'd")
    assert not cluster.failures


def test_grid_engines_qsub_first_on_path_is_named(sge, clusters):
    """This host has both: with Grid Engine's qsub first (no PBS on PATH), the submission
    fails at once naming the Grid Engine job it made, which the user can delete."""
    cluster = clusters(PBSCluster, **{**FAST, "gpus_per_node": 1})
    cluster.scale(jobs=1)
    with pytest.raises(RuntimeError, match="the qsub first on PATH is Grid Engine's") as error:
        cluster.wait_for_workers(gpus=1, timeout=60)
    number = re.search(r"Grid Engine job (\d+)", str(error.value)).group(1)
    subprocess.run(["qdel", number], capture_output=True, check=True)  # Grid Engine's qdel
    assert len(cluster.jobs) == 1 and cluster.jobs[0].state == "failed"


def test_walltime_retirement_ends_the_job_before_pbs_does_and_replaces_it(make):
    """PBS asks for no warning signal (it sends SIGTERM at the walltime, then SIGKILL), so a
    job's workers retire themselves ``retire_before`` ahead of it: a 40 s job ends by itself
    (``Exit_status`` 0, not PBS's walltime kill, -29) about 25 s after its worker started,
    and adapt's replacement, submitted ahead, holds the workers."""
    cluster = make(gpus_per_node=1, walltime="00:00:40", retire_before="15s",
                   lifetime_stagger="2s", replace_ahead="15s", signal_before_walltime=30)
    script = cluster.job_script()
    assert "--walltime 40 --retire-before 15s --lifetime-stagger 2s" in script
    assert "#PBS -l walltime=00:00:40" in script and "USR1" not in script
    cluster.adapt(minimum_jobs=1, maximum_jobs=1, interval="300ms")
    cluster.wait_for_workers(gpus=1, timeout=90)
    first = cluster.jobs[0]
    wait_for(lambda: not pbs_alive(first.job_id), 60, what=f"job {first.job_id} to end")
    out = subprocess.run(["qstat", "-x", "-f", "-F", "json", first.job_id], capture_output=True,
                         text=True).stdout
    assert json.loads(out)["Jobs"][first.job_id]["Exit_status"] == 0, out
    assert any("nears its walltime" in e and first.name in e for e in cluster.events), cluster.events
    wait_for(lambda: {j.name: j.state for j in cluster.jobs}[first.name] == "completed", 30,
             what=f"the cluster to see {first.name} completed:\n{cluster.job_table()}")
    cluster.wait_for_workers(gpus=1, timeout=90)
    with Client(cluster) as client:
        names = [w["name"] for w in client.scheduler_info()["workers"].values()]
        assert names and not any(n.startswith(first.name + "-") for n in names), names
    assert not cluster.failures


#: the first job's worker fails the network check on its host (the mom's name, as PBS's
#: exec_host says it); later jobs wait 12 s before their worker starts, longer than the
#: cluster takes to see them running
FAIL_FIRST_THEN_WAIT = r'''
mark={mark}
host=$(head -1 "$PBS_NODEFILE")
if [ ! -e "$mark" ]; then
  touch "$mark"
  echo "NetworkCheckError: interface 'ib0' on host $host is down (link state down): this host lost its network" >&2
  exit 1
fi
sleep 30
'''


def test_a_job_pbs_starts_on_an_excluded_host_is_cancelled_and_counted(make, tmp_path, caplog):
    """PBS has no request that keeps a job off a host: the replacement of a job whose network
    check failed lands on the same mom (the only one), is seen running there and cancelled
    with qdel before its worker starts, each such cancel a failed start, until
    ``max_failed_jobs`` ends the replacing with every report."""
    prologue = FAIL_FIRST_THEN_WAIT.format(mark=tmp_path / "failed-once").strip().splitlines()
    cluster = make(gpus_per_node=1, job_script_prologue=prologue, max_failed_jobs=3)
    with caplog.at_level("WARNING", logger="hpcgpu.cluster"), \
            pytest.raises(RuntimeError, match="started on excluded host") as error:
        cluster.scale(jobs=1)
        cluster.wait_for_workers(gpus=1, timeout=150)
    first, *others = cluster.jobs
    host = first.nodes[0]
    assert first.state == "failed" and others and all(j.excluded == (host,) for j in others), cluster.job_table()
    cancelled = [j for j in others if j.nodes == (host,)]
    assert len(cluster.failures) == 3 and len(cancelled) == 2, (cluster.failures, cluster.job_table())
    # PBS's own record: ended while the prologue still waited (30 s), that is by the qdel. At
    # once, or, where the delete reached the mom while it was still starting the job, at the
    # mom's kill_delay (10 s): OpenPBS 23.06 then starts the job, kills it 10 s later and
    # records it "finished", exit status 0 (seen once, in its server and mom logs)
    for job in cancelled:
        wait_for(lambda: not pbs_alive(job.job_id), 30, what=f"PBS to finish {job.job_id}")
        out = subprocess.run(["qstat", "-x", "-f", "-F", "json", job.job_id], capture_output=True, text=True).stdout
        record = json.loads(out)["Jobs"][job.job_id]
        seconds = sum(int(p) * 60 ** i for i, p in enumerate(reversed(record["resources_used"]["walltime"].split(":"))))
        assert record["job_state"] == "F" and seconds < 20, record
    assert f"started on excluded host(s) {host} (pbs has no request that keeps a job off a host)" in str(error.value)
    assert any("excluded from new jobs" in r.getMessage() and host in r.getMessage() for r in caplog.records)
