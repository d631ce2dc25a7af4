"""Adaptive scaling per pool: each pool grows from the tasks that only its workers can run.

distributed's ``Scheduler.adaptive_target`` gives one number for the whole cluster. With
pools, tasks restricted to ``{"GPU": 1}`` must grow the GPU pool and never the CPU one, so
:func:`pool_demand` reads the scheduler's state (in this process: pools keep the scheduler
here) and gives each pool its own demand:

- a waiting task (``unrunnable``: no worker can run it now; or ``queued``) counts for the
  first adapted pool whose workers' resources satisfy its restrictions; tasks without
  restrictions count for the default pool when it is adapted;
- a pool's demand in workers is ``min(tasks, occupancy / target_duration)`` task slots, each
  slot a fraction of a worker (``1/threads``, or the share of a worker's resource a task
  takes: one ``GPU`` task fills a GPU worker);
- its idle jobs (no worker processing anything) are the ones it may retire; their data moves
  to other workers first (``retire_workers``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any, Callable

from hpcgpu.cluster.batch.adaptive import GPUAdaptive

__all__ = ["PoolAdaptive", "PoolDemand", "pool_demand", "task_cost"]


@dataclass(frozen=True)
class PoolDemand:
    """What one pool's workload asks for: ``workers`` wanted; ``idle``: names of its
    workers processing nothing."""

    workers: int
    idle: frozenset[str] = frozenset()


def task_cost(restrictions: dict | None, resources: dict[str, float], threads: int) -> float:
    """The fraction of one worker of a pool that a task takes; ``inf`` where the pool's
    workers cannot run it.

    >>> task_cost({"GPU": 1}, {"GPU": 1, "pool-gpu": 1}, 8)
    1.0
    >>> task_cost(None, {"CPU": 4, "pool-cpu": 1}, 4), task_cost({"GPU": 1}, {"CPU": 4}, 4)
    (0.25, inf)
    """
    cost = 1 / max(threads, 1)
    for name, amount in (restrictions or {}).items():
        held = resources.get(name, 0)
        if held < amount:
            return math.inf
        cost = max(cost, amount / held)
    return cost


def pool_demand(scheduler: Any, pools: dict[str, tuple[dict, int]], pool_of: Callable,
                target_duration: float, default: str | None) -> dict[str, PoolDemand]:
    """Each adapted pool's demand. ``pools``: name -> (its workers' resources, threads of
    one worker), in order; ``pool_of``: worker name -> pool name (None: not adapted);
    ``default``: the pool of tasks without restrictions (None: the first that can run them).
    """
    occupancy = {p: 0.0 for p in pools}
    slots = {p: 0.0 for p in pools}  # tasks, in workers
    tasks = {p: 0 for p in pools}
    idle: dict[str, set] = {p: set() for p in pools}
    for ws in scheduler.workers.values():
        pool = pool_of(ws.name)
        if pool not in pools:
            continue
        resources, threads = pools[pool]
        occupancy[pool] += ws.occupancy
        tasks[pool] += len(ws.processing)
        slots[pool] += sum(task_cost(ts.resource_restrictions, resources, ws.nthreads)
                           for ts in ws.processing)
        if not ws.processing:
            idle[pool].add(str(ws.name))
    waiting = islice(chain(scheduler.unrunnable, scheduler.queued), 1000)
    for ts in waiting:
        pool, cost = _first_pool(ts.resource_restrictions, pools, default)
        if pool is None:
            continue
        occupancy[pool] += scheduler._get_prefix_duration(ts.prefix)
        tasks[pool] += 1
        slots[pool] += cost
    out = {}
    for pool in pools:
        if not tasks[pool]:
            out[pool] = PoolDemand(0, frozenset(idle[pool]))
            continue
        per_task = slots[pool] / tasks[pool]
        wanted = min(tasks[pool], math.ceil(occupancy[pool] / target_duration)) * per_task
        out[pool] = PoolDemand(max(1, math.ceil(wanted - 1e-9)), frozenset(idle[pool]))
    return out


def _first_pool(restrictions: dict | None, pools: dict, default: str | None):
    if not restrictions and default in pools:
        resources, threads = pools[default]
        return default, task_cost(None, resources, threads)
    for pool, (resources, threads) in pools.items():
        cost = task_cost(restrictions, resources, threads)
        if cost != math.inf:
            return pool, cost
    return None, 0.0


class PoolAdaptive(GPUAdaptive):
    """Adaptive scaling of several pools in whole jobs, each between its own bounds.

    ``bounds``: pool -> ``(minimum jobs, maximum jobs)`` of the pools it adapts (the others
    keep what ``scale`` gave them).
    """

    def __init__(self, cluster: Any, bounds: dict[str, tuple[int, float]], **kwargs: Any) -> None:
        self.bounds = dict(bounds)
        super().__init__(cluster, gpus_per_job=1, **kwargs)

    async def target(self) -> dict[str, PoolDemand]:  # type: ignore[override]
        fleet = self.cluster.fleet
        pools = {name: (fleet.resources(name), fleet.threads(name)) for name in self.bounds}
        default = "default" if "default" in self.bounds else None
        return pool_demand(self.cluster.scheduler, pools, fleet.worker_pool,
                           self.target_duration, default)

    async def safe_target(self) -> dict[str, PoolDemand]:  # type: ignore[override]
        return await self.target()

    async def recommendations(  # type: ignore[override]
            self, demand: dict[str, PoolDemand]) -> dict:
        cluster = self.cluster
        if len(self.plan) != len(self.requested):
            await cluster
        connected, fleet = cluster.connected_by_job(), cluster.fleet
        grow, to_close = {}, set()
        for pool, (low, high) in self.bounds.items():
            per_job = fleet.pools[pool].workers_per_job
            want = min(max(math.ceil(demand[pool].workers / per_job), low), high)
            have = fleet.jobs_of(pool)
            if want > len(have):
                grow[pool] = int(want)
                continue
            excess = len(have) - int(want)
            pending = [job for job in reversed(have) if not connected.get(job)][:excess]
            idle = [job for job in reversed(have) if job in connected and job not in pending
                    and connected[job] <= demand[pool].idle]
            to_close |= set(pending) | set(idle[: excess - len(pending)])
        firmly = self._firmly(to_close)
        if grow:
            return {"status": "up", "grow": grow, "close": sorted(firmly)}
        return {"status": "down", "workers": sorted(firmly)} if firmly else {"status": "same"}

    async def scale_up(  # type: ignore[override]
            self, grow: dict[str, int], close: list[str] = ()) -> None:
        for pool, jobs in grow.items():
            self.cluster.scale(jobs=jobs, pool=pool)
        if close:
            await self.cluster.retire_jobs(list(close))
