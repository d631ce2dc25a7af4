"""The plane on one worker: its input and output blocks, its sequence, its communicators.

Installed on first use by the first plane task a worker runs (:func:`state_of`), which
adds three handlers to the worker's server:

- ``hpcgpu_plane_run``: the scheduler's order to run one operation, with this worker's
  sequence number; operations run one at a time, strictly in sequence order, in a thread
  of their own (never a task thread: a collective must not wait for a free task slot);
- ``hpcgpu_plane_shards``: a peer's pieces for an operation (the comm transport);
- ``hpcgpu_plane_nccl_id``: a fresh NCCL unique id, asked of rank 0 of a new group.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dask

from hpcgpu.array.plane.ops import Context, operation
from hpcgpu.array.plane.transport import CommTransport, Inbox, NcclTransport, PlaneTimeout

__all__ = ["PlaneState", "state_of", "unpack_keys", "install"]

logger = logging.getLogger("distributed.hpcgpu.plane")
_LOCK = threading.Lock()


def state_of(worker) -> "PlaneState":
    """The worker's plane state, made (and its handlers installed) on first use."""
    with _LOCK:
        state = getattr(worker, "_hpcgpu_plane", None)
        if state is None:
            state = worker._hpcgpu_plane = PlaneState(worker)
            worker.handlers["hpcgpu_plane_run"] = state.run
            worker.handlers["hpcgpu_plane_shards"] = state.shards
            worker.handlers["hpcgpu_plane_nccl_id"] = state.nccl_id
            worker.handlers["hpcgpu_plane_drop"] = state.drop
            worker.handlers["hpcgpu_plane_gpus_shared"] = gpus_shared
        return state


def install(dask_worker=None) -> str:
    """Install the plane on this worker (run by the scheduler on the workers of an
    operation, once each: those that hold no input never ran a plane task)."""
    state_of(dask_worker)
    return dask_worker.address


def gpus_shared(nodes: list | None = None) -> bool:
    """Whether this process may open every NVIDIA GPU device node of its host (``nodes``:
    ``/dev/nvidia0``, ...). Not inside a task whose device cgroup holds only its own GPUs
    (``srun --gpus-per-task`` where SLURM constrains devices): CUDA IPC between such
    workers fails, and NCCL with it.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     open(os.path.join(d, "nvidia0"), "w").close()
    ...     gpus_shared([os.path.join(d, "nvidia0"), os.path.join(d, "nvidia1")])
    True
    """
    if nodes is None:
        nodes = glob.glob("/dev/nvidia[0-9]*")
    for node in nodes:
        try:
            os.close(os.open(node, os.O_RDONLY))
        except PermissionError:  # the device cgroup (or the file's mode) keeps it from us
            return False
        except OSError:  # gone, or not a device this kernel serves: no statement
            continue
    return True


def unpack_keys(msg_holders: list) -> dict:
    """``{(input, block): rank}`` from the msgpack form ``[[input, block, rank], ...]``."""
    return {(int(i), tuple(b)): int(r) for i, b, r in msg_holders}


class PlaneState:
    """Blocks, inbox, sequence and communicators of the plane on one worker."""

    def __init__(self, worker):
        self.worker = worker
        self.inputs: dict = {}    # token -> {(input, block): array}
        self.outputs: dict = {}   # token -> {block: array}
        self.made_by: dict = {}   # token -> the sequence number of the run that made its outputs
        self.inbox = Inbox()
        self.comms: dict = {}     # tuple of worker addresses -> NCCL communicator
        self.history: list = []  # (kind, token, transport, ranks, seconds) of recent operations
        self.done_seq = 0         # the scheduler numbers this worker's operations 1, 2, ...
        self._turn = None         # asyncio.Condition, made on the worker's loop
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hpcgpu-plane")
        self._lock = threading.Lock()

    def put(self, token: str, which: int, block: tuple, value) -> None:
        with self._lock:
            self.inputs.setdefault(token, {})[(which, block)] = value

    def take_output(self, token: str, block: tuple):
        with self._lock:
            outputs = self.outputs.get(token, {})
            if block not in outputs:
                raise RuntimeError(
                    f"collective {token}: output block {block} is not on this worker "
                    "(the worker that held it left, or the block was already taken); "
                    "compute the result again")
            value = outputs.pop(block)
            if not outputs:
                self.outputs.pop(token, None)
                self.made_by.pop(token, None)
            return value

    async def drop(self, token: str, seq: int) -> None:
        """Forget the output of run ``seq`` of an operation that failed elsewhere: nothing
        will take it (a retry's, made by a later run, stays). Its inputs stay too, for
        Dask's retry (their put tasks do not run again)."""
        with self._lock:
            if self.made_by.get(token) == seq:
                self.outputs.pop(token, None)
                self.made_by.pop(token, None)

    async def shards(self, token: str, src: int, arrays: list) -> None:
        self.inbox.put(token, int(src), list(arrays))

    def nccl_id(self) -> bytes:
        from cupy.cuda import nccl

        _nccl_env()  # making the id is this process's first NCCL call on rank 0
        return bytes(nccl.get_unique_id())

    async def run(self, token: str, seq: int, spec: dict, group: list, holders: list, owners: list,
                  transport: str, nccl_id: bytes | None = None, gpu: bool = False, keep=None) -> dict:
        if self._turn is None:
            self._turn = asyncio.Condition()
        async with self._turn:
            await self._turn.wait_for(lambda: self.done_seq >= seq - 1)
        try:
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(
                self._pool, self._execute, token, spec, list(group), unpack_keys(holders),
                {tuple(b): int(r) for b, r in owners}, transport, nccl_id, gpu,
                None if keep is None else {tuple(b) for b in keep}, seq)
            # asyncio.wait, not wait_for: a TimeoutError raised by the work itself is its own
            done, _ = await asyncio.wait({work}, timeout=_watchdog())
            if not done:
                self._give_up(token, group)
                raise PlaneTimeout(f"collective {token} still running after {_watchdog():g} s on "
                                   f"{self.worker.address}; its thread is abandoned")
            return work.result()
        finally:
            async with self._turn:
                self.done_seq = max(self.done_seq, seq)
                self._turn.notify_all()

    def _give_up(self, token: str, group: list) -> None:
        """A collective's thread is stuck (a blocking NCCL call whose peer is gone): abort
        its communicator, and run the next operations in a fresh thread."""
        comm = self.comms.pop(tuple(group), None)
        if comm is not None:  # never on the event loop: an abort may itself wait on the GPU
            threading.Thread(target=comm.abort, daemon=True, name="hpcgpu-nccl-abort").start()
        self.inbox.drop(token)
        self._pool.shutdown(wait=False)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hpcgpu-plane")

    def _execute(self, token, spec, group, holders, owners, transport, nccl_id, gpu, keep, seq) -> dict:
        op = operation(spec)
        rank = group.index(self.worker.address)
        with self._lock:  # read, not taken: a failed attempt leaves them to the next one
            inputs = dict(self.inputs.get(token, {}))
        mine = [k for k, r in holders.items() if r == rank]
        if any(k not in inputs for k in mine):
            raise RuntimeError(f"collective {token}: input blocks missing on rank {rank}; "
                               "compute the result again")
        timeout = float(dask.config.get("hpcgpu.array.plane.timeout", 10))
        chan = self._transport(transport, token, group, rank, timeout, nccl_id)
        xp = _array_module(next(iter(inputs.values()), None), gpu)
        start = time.perf_counter()
        try:
            outputs = op.run(Context(rank, len(group), holders, owners, inputs, chan, xp))
        except BaseException as error:
            self.inbox.drop(token)
            if chan.name == "nccl":
                self.comms.pop(tuple(group), None)
            if isinstance(error, MemoryError) or "OutOfMemory" in type(error).__name__:
                held = sum(getattr(v, "nbytes", 0) for v in inputs.values())
                raise MemoryError(
                    f"collective {op.kind} {token}: out of memory on rank {rank} while staging "
                    f"(its input blocks hold {held / 2**30:.2f} GiB; the plane adds send and receive "
                    "buffers of about the same size, and matmul all of b on every worker): use more "
                    f"workers, a larger memory pool, or method='tasks' ({error})") from error
            raise
        if chan.name == "nccl":
            xp.cuda.get_current_stream().synchronize()
        with self._lock:
            kept = outputs if keep is None else {b: v for b, v in outputs.items() if b in keep}
            if kept:
                self.outputs[token], self.made_by[token] = kept, seq
            self.inputs.pop(token, None)
        seconds = time.perf_counter() - start
        self.history = self.history[-99:] + [(op.kind, token, chan.name, len(group), seconds)]
        logger.info("collective %s %s: rank %d of %d, %s path, %d blocks in, %d out, %.3f s",
                    op.kind, token, rank, len(group), chan.name, len(mine), len(outputs), seconds)
        return {"rank": rank, "blocks": len(outputs)}

    def _transport(self, kind, token, group, rank, timeout, nccl_id):
        if kind != "nccl":
            return CommTransport(self.worker, self.inbox, token, group, rank, timeout)
        comm = self.comms.get(tuple(group))
        if comm is None:
            _nccl_env()
            comm = self.comms[tuple(group)] = _form(len(group), nccl_id, rank, timeout)
        return NcclTransport(comm, rank, timeout)


def _nccl_env() -> None:
    """NCCL's settings where the user set none, before this process's first NCCL call (NCCL
    reads them once, then keeps the network interface it chose for every later socket):
    multicast off (it can take a host's shared GPUs down), and sockets on loopback (the
    scheduler chooses NCCL within one host only). On two H200 a unique id made first, without
    them, put the workers' NCCL listeners on the host's address."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


def _watchdog() -> float:
    """Seconds after which a collective's own thread is given up (six no-progress times,
    at least a minute: a legitimate exchange is far shorter on any GPU link)."""
    return max(60.0, 6 * float(dask.config.get("hpcgpu.array.plane.timeout", 10)))


def _form(ranks: int, nccl_id: bytes, rank: int, timeout: float):
    """An NCCL communicator, or :class:`PlaneTimeout` when a peer never joins (forming one
    blocks until every rank has called it: here in a thread of its own, bounded)."""
    from cupy.cuda import nccl

    box: dict = {}

    def form():
        try:
            box["comm"] = nccl.NcclCommunicator(ranks, nccl_id, rank)
        except BaseException as error:  # noqa: BLE001 - handed to the caller below
            box["error"] = error

    thread = threading.Thread(target=form, daemon=True, name="hpcgpu-nccl-form")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise PlaneTimeout(f"NCCL group of {ranks} not formed within {timeout:g} s: a peer is missing")
    if "error" in box:
        raise box["error"]
    return box["comm"]


def _array_module(value, gpu: bool = False):
    """CuPy for CuPy blocks (or, on a rank that holds none, where the operation's are)."""
    if gpu or (value is not None and type(value).__module__.startswith("cupy")):
        import cupy

        return cupy
    import numpy

    return numpy
