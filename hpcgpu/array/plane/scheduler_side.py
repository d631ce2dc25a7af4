"""The plane on the scheduler: one place that orders every collective.

A collective's barrier task (on some worker) calls ``hpcgpu_plane`` here. The plugin

1. chooses the owner of each output block and restricts the unpacking task of that block
   to its owner, before the barrier finishes (so the scheduler sends each unpack where its
   block already is, as distributed's P2P shuffle does);
2. starts an operation only once none of its workers is still in an earlier one, and gives
   each its next sequence number: every worker runs its collectives in the scheduler's
   order, so two operations in flight never wait on each other (NCCL blocks until all
   ranks enter the same call), and all ranks start together, so a peer's timeout measures
   its partner's silence, not its partner's queue;
3. asks rank 0 of a new group for an NCCL unique id and hands it to the group over the
   cluster's own, authenticated comm;
4. orders the run on every worker at once and returns when all finished; any failure
   (a timeout, a worker's error) fails the barrier task with the worker's own error. A
   worker that cannot be reached is awaited until the scheduler has removed it; the
   barrier then asks Dask to run it again (``Reschedule``), after Dask has recomputed
   the input blocks that worker held (the others stay on their workers' planes).

When a worker leaves, restrictions that point at it are lifted, so the unpack tasks
run elsewhere and fail loudly, instead of waiting for a worker that will not come back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from urllib.parse import urlparse

from distributed.comm.core import CommClosedError
from distributed.diagnostics.plugin import SchedulerPlugin

from hpcgpu.array.plane.ops import operation
from hpcgpu.array.plane.worker_side import unpack_keys

__all__ = ["MemberLost", "PlanePlugin", "PLUGIN_NAME"]

PLUGIN_NAME = "hpcgpu-plane"
logger = logging.getLogger("distributed.hpcgpu.plane")
_REMEMBERED = 256


def _host(address: str) -> str:
    """The host of a worker address; unix sockets and in-process comms are this host's."""
    parsed = urlparse(address)
    if parsed.scheme in ("unix", "inproc", "local"):
        return "localhost"
    return parsed.hostname or address


def _puts_by_worker(holders: list, puts: list | None) -> dict:
    """Worker address -> the keys of the tasks that put its blocks (lists made tuples)."""
    out: dict = {}
    for holder, key in zip(holders, puts or [None] * len(holders)):
        keys = out.setdefault(holder[2], set())
        if key is not None:
            keys.add(tuple(key) if isinstance(key, list) else key)
    return out


class MemberLost(RuntimeError):
    """A collective failed because one of its workers left the cluster: its barrier task
    asks Dask to run it again (:func:`hpcgpu.array.plane.graph.barrier`)."""


class PlanePlugin(SchedulerPlugin):
    """Sequence numbers, NCCL groups and unpack restrictions of the plane."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.seq: dict = collections.defaultdict(int)
        self.busy: dict = {}  # worker -> its call in progress
        self.installed: dict = {}  # worker -> whether it may open every GPU of its host
        self.nccl_groups: set = set()
        self.walled_groups: set = set()  # groups told once that NCCL cannot join them
        self.restricted: collections.OrderedDict = collections.OrderedDict()

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler
        scheduler.handlers["hpcgpu_plane"] = self.run

    def remove_worker(self, scheduler, worker, **kwargs) -> None:
        self.seq.pop(worker, None)
        self.busy.pop(worker, None)
        self.installed.pop(worker, None)
        self.nccl_groups = {g for g in self.nccl_groups if worker not in g}
        for keys in self.restricted.values():
            lift = {k: None for k, w in keys.items() if w == worker and k in scheduler.tasks}
            if lift:
                scheduler.set_restrictions(lift)

    async def run(self, token: str, spec: dict, holders: list, unpack: list,
                  gpu: bool = False, puts: list | None = None) -> list:
        """Run one collective; return ``[[block, worker address], ...]``. ``puts``: per
        holder, the key of the task that put its block there."""
        op = operation(spec)
        put_by = _puts_by_worker(holders, puts)
        gone = sorted(set(put_by) - set(self.scheduler.workers))
        if gone:  # blocks on workers that left (markers that outlived them): put them again
            message = f"collective {op.kind} {token}: input blocks were on {gone}, which left the cluster"
            if self._recompute({k for w in gone for k in put_by[w]}):
                logger.warning("%s: their puts run again", message)
                raise MemberLost(message)
            raise RuntimeError(f"{message}; compute the result again")
        group = self._group(op, {h[2] for h in holders})
        ranked = [[w, b, group.index(a)] for w, b, a in holders]
        owners = op.owners(unpack_keys(ranked), len(group))
        await self._install(group)
        transport = self._transport(group, gpu)
        nccl_id = None
        if transport == "nccl" and tuple(group) not in self.nccl_groups:
            nccl_id = await self.scheduler.rpc(group[0]).hpcgpu_plane_nccl_id()
            self.nccl_groups.add(tuple(group))
        keys = {tuple(b): tuple(k) if isinstance(k, list) else k for b, k in unpack}
        self._restrict(token, keys, owners, group)
        # the output blocks this graph reads: the others (culled by Dask, or outputs not
        # asked for) are not kept on the workers, where nothing would ever take them
        keep = [list(b) for b, k in keys.items() if k in self.scheduler.tasks]
        msg = dict(token=token, spec=spec, group=group, holders=ranked, gpu=gpu, keep=keep,
                   owners=[[b, r] for b, r in owners.items()], transport=transport, nccl_id=nccl_id)
        await self._idle(group)  # no await from here until every call is marked busy
        seqs = {w: self._next(w) for w in group}
        calls = {asyncio.ensure_future(self.scheduler.rpc(w).hpcgpu_plane_run(seq=seqs[w], **msg)): w
                 for w in group}
        self.busy.update({w: f for f, w in calls.items()})
        # the first failure fails the operation: a stalled worker must not hold its peers
        done, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_EXCEPTION)
        failed = [(calls[f], f.exception()) for f in done if f.exception() is not None]
        for f in pending:  # their errors, if any come, are the same failure: read, not logged
            f.add_done_callback(lambda f: f.cancelled() or f.exception())
        if failed:
            for f, w in calls.items():  # what any rank made of it is dropped once its call ends
                f.add_done_callback(lambda _, w=w: asyncio.ensure_future(self._drop(w, token, seqs[w])))
            if transport == "nccl":
                self.nccl_groups.discard(tuple(group))
            await self._fail(op, token, group, failed, put_by)
        return [[b, group[r]] for b, r in owners.items()]

    async def _fail(self, op, token: str, group: list, failed: list, put_by: dict) -> None:
        """Raise the first failure. A worker that cannot be reached has most likely left
        (a peer's connection may close with it): once the scheduler has removed one such
        worker, the puts that gave the removed workers blocks run again on the workers left
        (their markers, copied elsewhere, would outlive them), and so does the barrier
        (:class:`MemberLost`)."""
        worker, error = failed[0]
        message = (f"collective {op.kind} {token} failed on {worker} "
                   f"({len(failed)} of {len(group)} workers so far): {error}")
        unreachable = [w for w, e in failed if isinstance(e, (CommClosedError, ConnectionError))]
        if unreachable and await self._removed(unreachable):
            left = [w for w in unreachable if w not in self.scheduler.workers]
            again = self._recompute({k for w in left for k in put_by.get(w, ())})
            logger.warning("%s; %s left: the operation runs again without it, %d of its puts "
                           "first", message, ", ".join(left), again)
            raise MemberLost(message) from error
        raise RuntimeError(message) from error

    def _recompute(self, keys: set) -> int:
        """Release the tasks ``keys`` that are in memory: Dask runs them again, and the
        barrier that waits on them. How many."""
        tasks = self.scheduler.tasks
        again = {k: "released" for k in keys if k in tasks and tasks[k].state == "memory"}
        self.scheduler.transitions(again, stimulus_id=f"hpcgpu-plane-lost-{time.time()}")
        return len(again)

    async def _removed(self, workers: list) -> bool:
        """Whether the scheduler removes one of ``workers`` within the plane's timeout (its
        stream closes soon after its process ends): the run again must not count it."""
        import dask

        deadline = time.monotonic() + float(dask.config.get("hpcgpu.array.plane.timeout", 10))
        while all(w in self.scheduler.workers for w in workers):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _drop(self, worker: str, token: str, seq: int) -> None:
        with contextlib.suppress(Exception):  # a worker that left has nothing to drop
            await self.scheduler.rpc(worker).hpcgpu_plane_drop(token=token, seq=seq)

    def _group(self, op, holders: set) -> list:
        """The workers that take part: those holding input, and for an operation that
        spreads its work (``op.spread``) every running worker: data held by one worker is
        still multiplied or rechunked by all."""
        if getattr(op, "spread", False):
            holders = holders | {ws.address for ws in self.scheduler.running}
        return sorted(holders)

    async def _install(self, group: list) -> None:
        """Plane handlers on the workers of ``group`` (once per worker; those holding no
        input never ran a plane task), and whether each may open every GPU of its host."""
        from distributed.protocol.pickle import dumps

        from hpcgpu.array.plane.worker_side import install

        missing = [w for w in group if w not in self.installed]
        await asyncio.gather(*(self.scheduler.rpc(w).run(function=dumps(install)) for w in missing))
        shared = await asyncio.gather(*(self.scheduler.rpc(w).hpcgpu_plane_gpus_shared() for w in missing))
        self.installed.update(zip(missing, map(bool, shared)))

    async def _idle(self, group: list) -> None:
        """Until no worker of ``group`` is still in an earlier collective: all ranks then start
        together, so a peer's timeout counts its partner's silence, not its queue (a worker
        ends each call within its watchdog, or leaves)."""
        while True:
            busy = [self.busy[w] for w in group if w in self.busy and not self.busy[w].done()]
            if not busy:
                return
            await asyncio.wait(busy)

    def _next(self, worker: str) -> int:
        self.seq[worker] += 1
        return self.seq[worker]

    def _transport(self, group: list, gpu: bool) -> str:
        import dask

        choice = dask.config.get("hpcgpu.array.plane.transport", "auto")
        if choice != "auto":
            return choice
        one_host = len({_host(w) for w in group}) == 1
        if not (gpu and one_host):
            return "comm"
        walled = [w for w in group if not self.installed.get(w, True)]
        if walled and tuple(group) not in self.walled_groups:
            self.walled_groups.add(tuple(group))
            logger.warning(
                "collective plane: %d of %d workers cannot open the host's other GPUs (a device "
                "cgroup per task, as srun --gpus-per-task gives under ConstrainDevices): CUDA IPC, "
                "and so NCCL, cannot join them; the cluster's comm carries the data instead. On "
                "SLURM 23.11 or later, srun --gres-flags=allow-task-sharing (or SLURM_GRES_FLAGS) "
                "lifts it; so does a job asked with --gpus-per-node", len(walled), len(group))
        return "comm" if walled else "nccl"

    def _restrict(self, token: str, keys: dict, owners: dict, group: list) -> None:
        wanted = {keys[b]: group[r] for b, r in owners.items() if b in keys}
        self.restricted[token] = wanted
        while len(self.restricted) > _REMEMBERED:
            self.restricted.popitem(last=False)
        present = {k: w for k, w in wanted.items() if k in self.scheduler.tasks}
        if present:
            self.scheduler.set_restrictions(present)
