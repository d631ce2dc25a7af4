"""PBS across hosts: the real OpenPBS with two more moms, each on a host of its own (network
and UTS namespaces: tests/schedulers/pbs/hosts), in their own queue ``multihost``. A job of 2
chunks runs on both moms: ``PBS_NODEFILE`` names 2 hosts, and Open MPI (Debian's, built
without PBS's TM) must be told them and reach the second one through PBS (``pbs_tmrsh``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchtools import CHECK, OMPI_ROOT
from cluster_helpers import FAST
from conftest import wait_for
from distributed import Client
from hpcgpu import PBSCluster
from test_batch_pbs import finished, qsub

pytestmark = pytest.mark.pbs
HOSTS = Path(__file__).parents[1] / "schedulers" / "pbs" / "hosts"
ROOT_MPI = ["export " + " ".join(f"{k}={v}" for k, v in OMPI_ROOT.items())]  # root runs the tests


@pytest.fixture(scope="module")
def pbs_hosts(pbs_server):
    """pbs2 and pbs3, up for this module only (their queue would change what the other PBS
    tests see of the server's queues)."""
    try:
        done = subprocess.run(["bash", str(HOSTS), "up", "2"], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        yield ["pbs2", "pbs3"]
    finally:  # also after a failed start: the next modules see the one-host server
        subprocess.run(["bash", str(HOSTS), "down"], capture_output=True, timeout=120)


def host_pids(host: str) -> list[str]:
    """The processes running on ``host`` (its network namespace), its mom excepted."""
    out = subprocess.run(["ip", "netns", "pids", f"pbs-host{host[3:]}"], capture_output=True,
                         text=True).stdout.split()

    def mom(pid: str) -> bool:
        try:
            return "pbs_mom" in Path(f"/proc/{pid}/cmdline").read_text(errors="ignore")
        except OSError:  # gone meanwhile
            return True
    return [pid for pid in out if not mom(pid)]


def test_a_cluster_of_two_hosts_puts_a_worker_on_each_gpu_of_both(pbs, pbs_hosts, clusters):
    """``PBSCluster(nodes=2, launcher="mpirun")``: one task per host through the host file,
    2 workers on each, each on its own GPU of the hook's; the compute runs; once the job has
    ended nothing of it is left on the second host (its tasks were PBS's, through TM)."""
    cluster = clusters(PBSCluster, **{**FAST, "nodes": 2, "gpus_per_node": 2, "queue": "multihost",
                                      "launcher": "mpirun", "job_script_prologue": ROOT_MPI})
    assert '--hostfile "$PBS_NODEFILE"' in cluster.job_script()
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=4, timeout=120)
    with Client(cluster) as client:
        seen = client.run(lambda: (os.uname().nodename, os.environ["CUDA_VISIBLE_DEVICES"]))
        assert sorted(seen.values()) == [("pbs2", "0"), ("pbs2", "1"), ("pbs3", "0"), ("pbs3", "1")]
        assert client.submit(sum, range(10)).result() == 45
    (job,) = cluster.jobs
    cluster.scale(jobs=0)
    wait_for(lambda: finished(job.job_id), 60, 0.5, what=f"PBS job {job.job_id} to end")
    wait_for(lambda: not host_pids("pbs3"), 30, 0.5, what="pbs3's tasks of the job to go")


def test_hpcgpu_run_with_mpirun_over_two_hosts(pbs, pbs_hosts, tmp_path):
    """``hpcgpu run --launcher mpirun`` in a job of 2 chunks on 2 hosts: a worker per GPU of
    both, and the script's exit code is the job's."""
    os.chmod(tmp_path, 0o755)
    script = "\n".join([
        "#!/bin/bash", "#PBS -q multihost", "#PBS -l select=2:ncpus=2:ngpus=2:mpiprocs=2",
        "#PBS -l place=scatter", "#PBS -l walltime=00:05:00", "#PBS -j oe", f"#PBS -o {tmp_path}/",
        'cd "$PBS_O_WORKDIR"', *ROOT_MPI,
        f"exec {sys.executable} -m hpcgpu run --launcher mpirun {CHECK} --expect 4 "
        "--json r.json --exit-code 7", ""])
    job_id = qsub(script, tmp_path)
    info = wait_for(lambda: finished(job_id), 180, 0.5, what=f"PBS job {job_id}")
    log = (tmp_path / f"{job_id}.OU").read_text()
    assert info["Exit_status"] == 7, log[-3000:]
    assert sorted(h.split("/")[0] for h in info["exec_host"].split("+")) == ["pbs2", "pbs3"]
    result = json.loads((tmp_path / "r.json").read_text())
    assert all(result["checks"].values()), result
    assert sorted(tuple(place) for place in result["places"].values()) == [
        (0, "0"), (0, "1"), (1, "0"), (1, "1")], result  # (node index, GPU): both hosts
