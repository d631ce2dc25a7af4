"""Every listener of every mode, as docs/security.md's table lists it (#38 break 5): the
sockets that the processes of a running cluster listen on (psutil), each named by the role
the scheduler reports for its port, against the table. A worker's HTTP server (``/health``,
``/metrics``, no password) listens on loopback unless the user asks."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import uuid

import pytest
from distributed import Client

from batchtools import OMPI_ROOT, ROOT, job_output, processes_with, slurm_finished
from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import LocalGPUCluster, SGECluster, SLURMCluster
from listeners import account, check_against_table, listening, roles, with_descendants
from ucx_marks import needs_ucx


def _own_sockets_since(before: set) -> list[dict]:
    return [s for s in listening([os.getpid()]) if (s["ip"], s["port"]) not in before]


def check_cluster_mode(make_cluster, job_variable: str, timeout: float) -> None:
    """Two GPU workers of the jobs of ``make_cluster()``: every socket of this process (since
    before the cluster, whose scheduler listens here) and of the jobs' processes is one the
    docs table lists."""
    before = {(s["ip"], s["port"]) for s in listening([os.getpid()])}
    cluster = make_cluster()
    cluster.scale(gpus=2)
    cluster.wait_for_workers(gpus=2, timeout=timeout)
    with Client(cluster) as client:
        info = client.scheduler_info(n_workers=-1)
    jobs = [job.job_id for job in cluster.jobs if job.job_id]
    pids = with_descendants([pid for job in jobs for pid, _ in processes_with(f"{job_variable}={job}")])
    assert pids, f"no process of jobs {jobs} found"
    seen, stray = account(_own_sockets_since(before) + listening(pids), info)
    check_against_table("cluster", seen, stray)


@pytest.mark.slurm
def test_cluster_mode_listeners_are_the_tables(slurm, clusters):
    check_cluster_mode(lambda: clusters(SLURMCluster, gpus_per_node=2, **FAST), "SLURM_JOB_ID", 120)


@pytest.mark.sge
def test_cluster_mode_on_grid_engine_listens_as_the_table_says(sge, clusters):
    check_cluster_mode(lambda: clusters(SGECluster, gpus_per_node=2, profile="sge-gpu", **FAST), "JOB_ID", 180)


def batch_listeners(tmp_path, gpus: int, export: str = "") -> tuple[dict, list]:
    """The sockets of an sbatch job of ``jobscripts/slurm-2x4.sbatch`` on ``gpus`` GPUs running
    ``listeners_batch_script.py`` (``export``: more variables), accounted by role."""
    out = tmp_path / "listeners.json"
    argv = ["sbatch", "--parsable", "--nodes=1", f"--ntasks-per-node={gpus}", f"--gpus-per-node={gpus}",
            "--cpus-per-task=1", "--mem=2G", "--time=5", "--job-name=hpcgpu-listeners",
            f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err",
            f"--export=ALL,HPCGPU_PYTHON={sys.executable}{export}", str(ROOT / "jobscripts" / "slurm-2x4.sbatch"),
            str(ROOT / "tests" / "listeners_batch_script.py"), str(out), str(gpus)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    assert state == ("COMPLETED", "0:0"), job_output(tmp_path, f"{job_id}.*")[-4000:]
    found = json.loads(out.read_text())
    return account(found["sockets"], found["info"])


@pytest.mark.slurm
def test_batch_mode_listeners_are_the_tables(slurm, tmp_path):
    check_against_table("batch", *batch_listeners(tmp_path, 2))


def test_local_mode_listeners_are_the_tables():
    before = {(s["ip"], s["port"]) for s in listening([os.getpid()])}
    with LocalGPUCluster(n_workers=2, gpus=[]) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        info = client.scheduler_info(n_workers=-1)
        children = with_descendants([os.getpid()]) - {os.getpid()}
        seen, stray = account(_own_sockets_since(before) + listening(children), info)
    check_against_table("local", seen, stray)


@pytest.fixture(scope="module")
def ucx_clusters(tmp_path_factory) -> dict:
    """Protocol -> what tests/listeners_ucx_script.py found for a local cluster of it: both
    UCX protocols in one process of their own (one UCX start-up for both tests)."""
    out = tmp_path_factory.mktemp("ucx") / "listeners.json"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "listeners_ucx_script.py"), str(out),
                           "ucx+auth", "ucx"], capture_output=True, text=True, timeout=240, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _ucx_accounted(found: dict) -> tuple[dict, list, list]:
    """(seen, stray) as :func:`account` gives them, a wildcard listener that takes connections
    at one address only listed at that one; and the sockets of the scheduler, workers, nannies."""
    shown = [dict(s, ip=s["admits"][0]) if len(s.get("admits", ())) == 1 else s for s in found["sockets"]]
    seen, stray = account(shown, found["info"])
    assert seen["UCX transport"], found["sockets"]  # the transport's own listeners were seen
    ports = {port for role in ("scheduler", "worker", "nanny") for _, port in roles(found["info"])[role]}
    return seen, stray, [s for s in found["sockets"] if s["port"] in ports]


@needs_ucx
@pytest.mark.xdist_group("ucx")  # not beside another UCX cluster (tests/conftest.py)
def test_local_mode_over_ucx_auth_listens_as_the_table_says(ucx_clusters):
    """UCX's rows: distributed-ucxx's listeners (the key's proof on each connection) and UCX's
    own TCP transport, which listens on each interface in every process."""
    found = ucx_clusters["ucx+auth"]
    seen, stray, dask = _ucx_accounted(found)
    check_against_table("local ucx+auth", seen, stray)
    # bound to the wildcard address (ucxx's API takes none), yet they take a connection at
    # 127.0.0.1 only, the address the cluster advertises: a socket filter drops the others
    assert len(dask) == 5 and all(s["ip"] == "0.0.0.0" and s["admits"] == ["127.0.0.1"] for s in dask), dask
    assert found["info"]["address"].startswith("ucx+auth://127.0.0.1:"), found["info"]["address"]


@needs_ucx
@pytest.mark.xdist_group("ucx")
def test_local_mode_over_plain_ucx_listens_on_every_address_as_the_table_says(ucx_clusters):
    """Plain ``ucx`` gets no filter (docs/security.md, UCX): advertised at 127.0.0.1, its
    listeners take a connection at every address of the host, and a client without the
    key that comes in over the host's network address joins."""
    found = ucx_clusters["ucx"]
    seen, stray, dask = _ucx_accounted(found)
    check_against_table("local ucx", seen, stray)
    assert len(found["addresses"]) > 1, found["addresses"]  # loopback and a network address
    assert len(dask) == 5 and all(s["ip"] == "0.0.0.0" and sorted(s["admits"]) == sorted(found["addresses"])
                                  for s in dask), dask
    assert found["info"]["address"].startswith("ucx://127.0.0.1:"), found["info"]["address"]
    assert found["joined"] and found["joined"] == [a for a in found["addresses"] if a != "127.0.0.1"]


@needs_ucx
def test_ucx_listeners_bind_every_address_because_ucxx_takes_no_host():
    """Why ucx+auth's listeners need a socket filter (hpcgpu.network.bindfilter) to keep to the
    asked address: distributed-ucxx passes only its port to ucxx
    (``ucxx.create_listener(cb, port=...)``), whose Python binding builds UCX's listener on the
    wildcard address (``UCXListener.create(worker, port, ...)``), although UCX and libucxx's
    C++ ``ListenerBuilder`` can take a host. When an installed ucxx takes one, this fails:
    then hpcgpu.network.ucxauth passes the listener's host instead."""
    import ucxx
    from distributed_ucxx.ucxx import UCXXListener
    from ucxx._lib.libucxx import UCXListener

    host_names = {"host", "ip", "ip_address", "address", "addr"}
    assert not host_names & set(inspect.signature(ucxx.create_listener).parameters)
    assert not host_names & set(inspect.signature(UCXListener.create).parameters)
    assert "create_listener(serve_forever, port=self._input_port)" in inspect.getsource(UCXXListener.start)


@pytest.mark.mpi
def test_mpi_mode_listeners_are_the_tables(tmp_path):
    marker = uuid.uuid4().hex
    out = tmp_path / "listeners.json"
    argv = ["mpirun", "--oversubscribe", "-n", "3", sys.executable, "-m", "hpcgpu.mpi",
            str(ROOT / "tests" / "listeners_batch_script.py"), str(out), "3"]
    env = dict(os.environ, **OMPI_ROOT, CUDA_VISIBLE_DEVICES="0,1,2", HPCGPU_TEST_MARKER=marker)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    seen, stray = account(found["sockets"], found["info"])
    check_against_table("mpi", seen, stray)


@pytest.mark.slurm
def test_cluster_mode_with_the_scheduler_in_a_job_listens_as_the_table_says(slurm, clusters):
    cluster = clusters(SLURMCluster, gpus_per_node=1, scheduler_in_job=True, **FAST)
    cluster.scale(gpus=2)
    cluster.wait_for_workers(gpus=2, timeout=180)  # every job's worker registered: none still starting
    with Client(cluster) as client:
        info = client.scheduler_info(n_workers=-1)
    jobs = [job.job_id for job in cluster.jobs if job.job_id] + [cluster.scheduler.job.job_id]
    pids = with_descendants([pid for job in jobs for pid, _ in processes_with(f"SLURM_JOB_ID={job}")])
    # the scheduler's other listeners (one per protocol: the client's, the workers')
    listeners = [_port_of(a) for a in (cluster.scheduler.contact_address, cluster.scheduler.address)]
    seen, stray = account(listening(pids), info, extra_scheduler_ports=listeners)
    check_against_table("cluster", seen, stray)


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


@pytest.mark.slurm
def test_gpurunner_listeners_are_the_tables(slurm, tmp_path):
    out = tmp_path / "listeners.json"
    argv = ["srun", "--nodes=1", "--ntasks=2", "--gpus-per-task=1", "--cpus-per-task=1",
            "--mem=2G", "--time=5", "--job-name=hpcgpu-listeners", sys.executable,
            str(ROOT / "tests" / "listeners_batch_script.py"), str(out), "2", "--runner"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    seen, stray = account(found["sockets"], found["info"])
    check_against_table("GPURunner", seen, stray)


@pytest.mark.slurm
def test_a_site_that_scrapes_the_workers_asks_once(slurm, clusters):
    """``worker_http_address`` opens the workers' HTTP servers (and only them) to the network;
    the one documented option (docs/security.md)."""
    cluster = clusters(SLURMCluster, gpus_per_node=1, worker_http_address="0.0.0.0:0", **FAST)
    cluster.scale(gpus=1)
    cluster.wait_for_workers(gpus=1, timeout=120)
    with Client(cluster) as client:
        info = client.scheduler_info(n_workers=-1)
    jobs = [job.job_id for job in cluster.jobs if job.job_id]
    pids = with_descendants([pid for job in jobs for pid, _ in processes_with(f"SLURM_JOB_ID={job}")])
    seen, stray = account(listening(pids), info)
    assert not stray and seen["worker HTTP"] == {("http", "network")}, (seen, stray)
    assert seen["worker"] == {("tls", "network")}


@pytest.mark.slurm
def test_batch_mode_reads_the_config_key_from_the_jobs_environment(slurm, tmp_path):
    seen, stray = batch_listeners(tmp_path, 1, ",DASK_HPCGPU__DEFAULTS__WORKER_HTTP_ADDRESS=0.0.0.0:0")
    assert not stray and seen["worker HTTP"] == {("http", "network")}, (seen, stray)
