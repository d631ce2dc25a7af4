"""Pool validation, naming and per-pool demand, without a batch scheduler."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from hpcgpu.cluster.batch.pool_adaptive import pool_demand
from hpcgpu.cluster.batch.pools import PoolJobKey, pool_options
from hpcgpu.system import commands
from hpcgpu.system.commands import CommandResult

GPU = ({"GPU": 1.0, "pool-default": 1.0}, 4)
CPU = ({"CPU": 8.0, "pool-cpu": 1.0}, 8)


class Task:
    """What pool_demand reads of a TaskState (hashable, as the scheduler's are)."""

    def __init__(self, restrictions, prefix):
        self.resource_restrictions, self.prefix = restrictions, prefix


def task(restrictions=None, prefix="f"):
    return Task(restrictions, prefix)


def scheduler(workers=(), unrunnable=(), queued=()):
    return SimpleNamespace(workers={w.name: w for w in workers}, unrunnable=dict.fromkeys(unrunnable),
                           queued=list(queued), _get_prefix_duration=lambda prefix: 1.0)


def worker(name, processing=(), nthreads=4):
    return SimpleNamespace(name=name, processing=set(processing), nthreads=nthreads,
                           occupancy=float(len(processing)))


def pool_of(name):
    return "cpu" if "-cpu-" in name else "default"


def test_gpu_tasks_grow_only_the_gpu_pool_one_worker_per_task():
    waiting = [task({"GPU": 1}) for _ in range(6)]
    demand = pool_demand(scheduler(unrunnable=waiting), {"default": GPU, "cpu": CPU}, pool_of,
                         target_duration=1.0, default="default")
    assert demand["default"].workers == 6 and demand["cpu"].workers == 0


def test_cpu_tasks_grow_only_the_cpu_pool_and_share_its_threads():
    waiting = [task({"CPU": 1}) for _ in range(16)]
    demand = pool_demand(scheduler(unrunnable=waiting), {"default": GPU, "cpu": CPU}, pool_of,
                         target_duration=1.0, default="default")
    assert demand["cpu"].workers == 2 and demand["default"].workers == 0


def test_unrestricted_tasks_count_for_the_default_pool_and_idle_workers_are_named():
    busy = worker("C-0-0-0", processing=[task({"GPU": 1})])
    idle = worker("C-cpu-1", nthreads=8)
    demand = pool_demand(scheduler([busy, idle], queued=[task() for _ in range(8)]),
                         {"default": GPU, "cpu": CPU}, pool_of, target_duration=100.0,
                         default="default")
    assert demand["default"].workers >= 1 and demand["cpu"].workers == 0
    assert demand["cpu"].idle == {"C-cpu-1"} and not demand["default"].idle


def test_a_task_no_adapted_pool_can_run_asks_for_nothing():
    demand = pool_demand(scheduler(unrunnable=[task({"TPU": 1})]), {"cpu": CPU}, pool_of, 1.0,
                         default=None)
    assert demand["cpu"].workers == 0


def test_pool_job_key_and_names():
    key = PoolJobKey((("SLURMCluster-cpu-", 0), ("SLURMCluster-big-", 2)), 2)
    assert key("SLURMCluster-cpu-12") == "SLURMCluster-cpu-12"
    assert key("SLURMCluster-big-3-1-0") == "SLURMCluster-big-3"
    assert key("SLURMCluster-4-0-3") == "SLURMCluster-4"
    with pytest.raises(ValueError, match="not a pool name"):
        pool_options("my-pool", {}, {})
    with pytest.raises(ValueError, match="cores_per_node and processes are for a CPU pool"):
        pool_options("big", dict(gpus_per_node=2, cores_per_node=4), {})
    cpu, options = pool_options("cpu", dict(gpus_per_node=0, cores_per_node=4,
                                            memory_per_node="8GB"),
                                {"gpus_per_node": 4, "cpus_per_gpu": 8, "launcher": "srun",
                                 "python": "/usr/bin/python3", "queue": "gpu"})
    assert cpu and options == {"python": "/usr/bin/python3", "queue": "gpu", "cores": 4,
                               "memory": "8GB", "processes": 1, "job_name": "hpcgpu-cpu"}


@pytest.mark.parametrize("name, queue, account", [("pbs", "#PBS -q debug", "#PBS -A proj"),
                                                  ("lsf", "#BSUB -q debug", '#BSUB -P "proj"')])
def test_pbs_and_lsf_pools_render_their_own_directives(name, queue, account, clusters):
    from hpcgpu import LSFCluster, PBSCluster

    cls = {"pbs": PBSCluster, "lsf": LSFCluster}[name]
    cluster = clusters(cls, gpus_per_node=2, queue="gpu", account="proj", walltime="00:10:00",
                       scheduler_options={"dashboard_address": "localhost:0"},
                       pools={"cpu": dict(gpus_per_node=0, cores_per_node=4,
                                          memory_per_node="8GB", queue="debug")})
    cpu, gpu = cluster.job_script(pool="cpu"), cluster.job_script()
    assert queue in cpu and account in cpu and queue not in gpu
    assert "--resources CPU=4,pool-cpu=1" in cpu and "--resources pool-default=1" in gpu


def test_a_cpu_pool_before_a_gpu_pool_leaves_the_gpu_pools_retirement_alone():
    """A CPU pool retires through dask-jobqueue's --lifetime; the GPU pools after it in the
    dict keep the cluster's retire_before and signal_before_walltime."""
    from hpcgpu.cluster.batch.pool_setup import prepare_pools

    options = dict(gpus_per_node=2, walltime="01:00:00", queue="unchecked")
    retire = ("600", None, None, 120, None)
    pools = {"cpu": dict(gpus_per_node=0, cores_per_node=4, memory_per_node="8GB"),
             "big": dict(gpus_per_node=4)}
    unanswered = CommandResult(("sinfo",), 127, "", "sinfo: command not found")
    commands.set_runner(lambda argv, timeout, input: unanswered)  # no SLURM: queue unchecked
    try:
        with warnings.catch_warnings():  # where sinfo cannot answer, the check only warns
            warnings.simplefilter("ignore")
            cpu, big = prepare_pools("slurm", pools, options, retire)
    finally:
        commands.set_runner(None)
    assert big.retirement is not None and big.retirement.retire_before == 600.0
    assert "--signal=USR1@120" in big.job_options["job_extra_directives"]
    assert cpu.retirement is None
