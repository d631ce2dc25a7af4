"""Lost jobs and workers on the real local Grid Engine: qdel and kill -9 mid-computation."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from distributed import Client, wait

from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import SGECluster
from hpcgpu.system.workers import scheduler_workers
from reliability_helpers import lose_the_job_mid_chain

pytestmark = pytest.mark.sge


@pytest.fixture
def cluster(sge, clusters):
    return clusters(SGECluster, gpus_per_node=1, **FAST)


def test_qdel_mid_computation_is_recomputed_and_replaced(cluster, tmp_path):
    first, ran = lose_the_job_mid_chain(
        cluster, str(tmp_path / "runs.log"), gpus=1, n=16, started=4,
        kill=lambda job_id: subprocess.run(["qdel", job_id], check=True, capture_output=True))
    assert max(ran.values()) >= 2  # lost with the job, recomputed on its replacement
    assert len(cluster.jobs) >= 2 and cluster.jobs[1].job_id
    # the replacement's node, as qstat gives it, once it runs (#43 item 5: it showed '-')
    wait_for(lambda: cluster.jobs[1].state != 'running' or cluster.jobs[1].nodes, 10,
             what="the replacement job's node")
    assert any(first.name in e and "ended while its workers were connected" in e
               for e in cluster.events), cluster.events


def test_sge_worker_killed_outright_is_restarted(cluster):
    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=1, timeout=60)
    with Client(cluster) as client:
        data = client.map(lambda i: i + 1, range(8), pure=False)
        wait(data)
        (pid,) = client.run(os.getpid).values()
        os.kill(pid, signal.SIGKILL)
        assert client.submit(sum, data).result(timeout=60) == sum(range(1, 9))
        wait_for(lambda: len(scheduler_workers(client)) == 1, 60,
                 what="the nanny to restart the worker")
        assert pid not in client.run(os.getpid).values()
