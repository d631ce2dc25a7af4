"""Several pools in one cluster on the real local SLURM: a GPU pool (partition gpu) and a
CPU pool (partition debug) behind one scheduler."""

from __future__ import annotations

import time

import dask
import pytest
from distributed import get_worker, wait

from cluster_helpers import FAST, recorded_commands, squeue_state
from conftest import wait_for
from hpcgpu import SLURMCluster
from hpcgpu.system.workers import scheduler_workers

pytestmark = pytest.mark.slurm

CPU_POOL = dict(gpus_per_node=0, cores_per_node=2, memory_per_node="2GB", queue="debug")


@pytest.fixture
def make(slurm, clusters):
    def make(**options):
        return clusters(SLURMCluster, **{**FAST, "gpus_per_node": 2, "queue": "gpu",
                                         "pools": {"cpu": CPU_POOL}, **options})
    return make


def workers_by_pool(client) -> dict[str, dict[str, dict]]:
    """pool -> worker name -> its resources, as the scheduler sees them."""
    out: dict[str, dict[str, dict]] = {}
    for info in scheduler_workers(client).values():
        pool = next(k[5:] for k in info["resources"] if k.startswith("pool-"))
        out.setdefault(pool, {})[info["name"]] = info["resources"]
    return out


# A lambda travels by value: the workers cannot import this module.
where = lambda _x=None: str(get_worker().name)  # noqa: E731


def test_gpu_and_cpu_pools_scaled_together_run_annotated_tasks_on_the_right_pool(make):
    cluster = make(pools={"cpu": dict(CPU_POOL, job_name="load"),
                          "big": dict(gpus_per_node=1, gpu_type="h100")})
    assert "--partition=gpu" in cluster.job_script()
    assert "#SBATCH -p debug" in cluster.job_script(pool="cpu")
    assert "--gpus-per-node=h100:1" in cluster.job_script(pool="big")
    with recorded_commands() as calls:
        cluster.scale(gpus=2)
        cluster.scale(jobs=1, pool="cpu")
        cluster.scale(jobs=2, pool="big")  # one array of 2 elements
        cluster.wait_for_workers(5, timeout=180)
    assert len([argv for argv in calls if argv[0] == "sbatch"]) == 3
    jobs = {}
    for job in cluster.jobs:
        jobs.setdefault(job.pool, []).append(job)
    assert {p: len(j) for p, j in jobs.items()} == {"default": 1, "cpu": 1, "big": 2}
    # each pool numbers its jobs from 0 (docs/pools.md); the CPU pool's job_name is its own
    assert [j.name for j in jobs["cpu"]] == ["SLURMCluster-cpu-0"]
    assert sorted(j.name for j in jobs["big"]) == ["SLURMCluster-big-0", "SLURMCluster-big-1"]
    assert all("_" in j.job_id for j in jobs["big"])
    assert squeue_state(jobs["cpu"][0].job_id, "%j") == "load"
    assert squeue_state(jobs["cpu"][0].job_id, "%P") == "debug"
    assert squeue_state(jobs["default"][0].job_id, "%P") == "gpu"
    assert "pool" in repr(cluster.jobs).splitlines()[0] and "<th>pool</th>" in cluster._repr_html_()
    with cluster.get_client() as client:
        pools = workers_by_pool(client)
        assert {p: len(w) for p, w in pools.items()} == {"default": 2, "cpu": 1, "big": 2}
        assert all(r["GPU"] == 1 and "CPU" not in r for r in pools["default"].values())
        assert all(r["GPU"] == 1 and "CPU" not in r for r in pools["big"].values())
        assert [r.get("CPU") for r in pools["cpu"].values()] == [2]
        with dask.annotate(resources={"GPU": 1}):
            on_gpu = [dask.delayed(where)(i) for i in range(12)]
        with dask.annotate(resources={"CPU": 1}):
            on_cpu = [dask.delayed(where)(i) for i in range(12)]
        with dask.annotate(resources={"pool-big": 1}):
            on_big = [dask.delayed(where)(i) for i in range(8)]
        gpu_ran, cpu_ran, big_ran = client.compute([on_gpu, on_cpu, on_big], sync=True)
    assert set(gpu_ran) <= set(pools["default"]) | set(pools["big"]) and gpu_ran
    assert set(cpu_ran) == set(pools["cpu"])
    assert set(big_ran) <= set(pools["big"]) and big_ran
    assert {cluster.job_key(w) for w in big_ran} <= {j.name for j in jobs["big"]}


def test_retiring_one_pool_leaves_the_other_running(make):
    cluster = make()
    cluster.scale(gpus=2)
    cluster.scale(jobs=1, pool="cpu")
    cluster.wait_for_workers(3, timeout=180)
    ids = {job.pool: job.job_id for job in cluster.jobs}
    cluster.scale(jobs=0, pool="cpu")
    wait_for(lambda: squeue_state(ids["cpu"], "%T") in ("", "CANCELLED", "COMPLETED"), 60,
             what="the CPU pool's job to end")
    with cluster.get_client() as client:
        wait_for(lambda: len(scheduler_workers(client)) == 2, 60,
                 what="the GPU pool's workers alone")
        assert set(workers_by_pool(client)) == {"default"}
        assert squeue_state(ids["default"], "%T") == "RUNNING"
        with dask.annotate(resources={"GPU": 1}):
            total = dask.delayed(sum)([dask.delayed(lambda x: x + 1)(i) for i in range(10)])
        assert client.compute(total, sync=True) == 55
    # the table shows it at a later poll
    wait_for(lambda: [j.state for j in cluster.jobs] == ["running", "cancelled"], 60,
             what=f"the table to show the CPU pool's job ended:\n{cluster.job_table()}")
    assert [j.pool for j in cluster.jobs] == ["default", "cpu"]
    # and the other way round: retiring the GPU pool leaves the CPU pool
    cluster.scale(jobs=1, pool="cpu")
    cluster.wait_for_workers(1, timeout=180, pool="cpu")
    cluster.scale(gpus=0)
    with cluster.get_client() as client:
        wait_for(lambda: set(workers_by_pool(client)) == {"cpu"}, 60, what="the CPU pool alone")
        assert client.submit(lambda: 6 * 7).result() == 42
    assert sorted(cluster.fleet.jobs_of("cpu")) == sorted(cluster.worker_spec)


def computed(client, work: list, timeout: float = 180) -> list:
    """The results of ``work``; a TimeoutError (not a hang) when no pool grows to run it."""
    futures = client.compute(work)
    wait(futures, timeout=timeout)
    return client.gather(futures)


def test_adapt_grows_the_gpu_pool_for_gpu_work_while_the_cpu_pool_stays_idle(make):
    cluster = make()
    cluster.adapt(minimum_gpus=0, maximum_gpus=4, pools={"cpu": dict(minimum_jobs=0, maximum_jobs=2)},
                  interval="300ms", wait_count=3, target_duration="1s")
    with cluster.get_client() as client:
        with dask.annotate(resources={"GPU": 1}):
            work = [dask.delayed(lambda x: (time.sleep(0.3), x)[1])(i) for i in range(30)]
        assert sum(computed(client, work)) == sum(range(30))
        assert not [j for j in cluster.jobs if j.pool == "cpu"], cluster.job_table()
        assert 1 <= len(cluster.jobs) <= 2, cluster.job_table()
        # CPU-only work then grows the CPU pool, not the GPU one.
        gpu_jobs = len(cluster.jobs)
        with dask.annotate(resources={"CPU": 1}):
            work = [dask.delayed(lambda x: (time.sleep(0.3), x)[1])(i) for i in range(10)]
        assert sum(computed(client, work)) == sum(range(10))
        assert [j.pool for j in cluster.jobs].count("cpu") >= 1
        assert len([j for j in cluster.jobs if j.pool == "default"]) == gpu_jobs
        wait_for(lambda: not cluster.worker_spec and not scheduler_workers(client),
                 120, interval=0.5, what=f"adapt back to 0:\n{cluster.job_table()}")


def test_bad_pools_are_refused_before_anything_is_submitted(slurm, clusters):
    with pytest.raises(ValueError, match=r"pools\['cpu'\]: unknown option\(s\) cores"):
        SLURMCluster(gpus_per_node=1, pools={"cpu": dict(gpus_per_node=0, cores=2)})
    with pytest.raises(ValueError, match="needs cores_per_node= and memory_per_node="):
        SLURMCluster(gpus_per_node=1, pools={"cpu": dict(gpus_per_node=0, cores_per_node=2)})
    with pytest.raises(ValueError, match="is not a pool name"):
        SLURMCluster(gpus_per_node=1, pools={"default": dict(gpus_per_node=1)})
    with pytest.raises(ValueError, match=r"pools\['big'\]: gpus_per_node=8 is more than the 4 "
                                         "GPUs a node of partition 'gpu' has"):
        SLURMCluster(gpus_per_node=1, pools={"big": dict(gpus_per_node=8, queue="gpu")})
    with pytest.raises(ValueError, match=r"pools\['cpu'\]: cores_per_node=64 is more than the "
                                         "32 cores a node of partition 'debug' has"):
        SLURMCluster(gpus_per_node=1, pools={"cpu": dict(CPU_POOL, cores_per_node=64)})
    with pytest.raises(ValueError, match=r"pools\['cpu'\]: cpus_per_gpu= is for GPU pools"):
        SLURMCluster(gpus_per_node=1, pools={"cpu": dict(CPU_POOL, cpus_per_gpu=2)})
    cluster = clusters(SLURMCluster, **FAST, gpus_per_node=1, pools={"cpu": CPU_POOL})
    with pytest.raises(ValueError, match="pool='gpu' is not a pool of this cluster: use one "
                                         "of 'default', 'cpu'"):
        cluster.scale(jobs=1, pool="gpu")
    with pytest.raises(ValueError, match="has CPU workers only"):
        cluster.scale(gpus=2, pool="cpu")
    with pytest.raises(ValueError, match="adapt.*give a dict of"):
        cluster.adapt(pools={"cpu": dict(maximum_gpu=2)})
    assert not cluster.jobs and not cluster.worker_spec


def test_walltime_replacement_is_per_pool(make):
    """A pool with a 1-minute walltime (SLURM's shortest) is replaced by a job of the same
    pool near its end (~10 s in: a quarter of it, less the planner's gather window); the
    default pool (10 minutes) and the CPU pool keep their jobs."""
    cluster = make(pools={"cpu": CPU_POOL, "short": dict(gpus_per_node=1, walltime="00:01:00")},
                   retire_before="20s", lifetime_stagger="2s", replace_ahead="30s")
    cluster.scale(gpus=2)
    cluster.scale(jobs=1, pool="short")
    cluster.scale(jobs=1, pool="cpu")
    cluster.wait_for_workers(4, timeout=180)
    first = {job.name: job.pool for job in cluster.jobs}
    wait_for(lambda: len(cluster.jobs) == 4 and cluster.jobs[-1].job_id, 150, interval=1,
             what=f"the short pool's replacement:\n{cluster.job_table()}")
    new = cluster.jobs[-1]
    assert new.pool == "short" and new.name.startswith("SLURMCluster-short-")
    old = next(name for name, pool in first.items() if pool == "short")
    assert any("nears its walltime" in e and f"job {old} " in e for e in cluster.events)
    assert not any("nears its walltime" in e and f"job {name} " in e
                   for e in cluster.events for name, pool in first.items() if pool != "short")
    assert sorted(cluster.fleet.jobs_of("short")) == [new.name]
    cluster.wait_for_workers(4, timeout=120)
