"""How a collective's pieces cross between workers: one ``exchange`` call per operation.

``exchange(sends, expect)`` sends ``sends[peer]`` (a list of arrays) to each peer and
returns, per peer, the arrays it sent here, shaped as ``expect[peer]`` (a list of
``(shape, dtype)``). Every rank makes the same calls per operation (one, or several rounds
such as a sort's), in the same order as its peers (the plane's sequence numbers see to
that).

- :class:`CommTransport` uses the cluster's own comm (TCP/TLS, UCX): any chunk type,
  any hosts, authenticated as every other message of the cluster.
- :class:`NcclTransport` packs each peer's pieces into one buffer on the GPU and moves them
  with NCCL send/receive in one group: data stays on the GPUs and takes NVLink where there
  is one. The group runs on a stream of its own that waits for the caller's stream (where
  the pieces were made), and returns once it has finished.

A peer that does not send within ``timeout`` seconds (no progress) makes the exchange
raise :class:`PlaneTimeout`, naming the peers it waited for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from math import prod

import numpy as np

__all__ = ["PlaneTimeout", "CommTransport", "NcclTransport", "Inbox"]

#: bytes between packed pieces: CUDA kernels read aligned addresses
_ALIGN = 256


class PlaneTimeout(RuntimeError):
    """A peer of a collective sent nothing for longer than the plane's timeout."""


class Inbox:
    """Arrays that peers sent to this worker, per operation token and source rank.

    Filled from the worker's event loop (a handler), read from the collective's thread.
    """

    def __init__(self) -> None:
        self._items: dict = {}
        self._cond = threading.Condition()

    def put(self, token: str, src: int, arrays: list) -> None:
        with self._cond:
            self._items.setdefault(token, {})[src] = arrays
            self._cond.notify_all()

    def take(self, token: str, peers: set, timeout: float) -> dict:
        """Wait for every peer in ``peers``; the clock restarts whenever one arrives."""
        got: dict = {}
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                box = self._items.get(token, {})
                for src in [s for s in box if s in peers and s not in got]:
                    got[src] = box.pop(src)
                    deadline = time.monotonic() + timeout
                if len(got) == len(peers):
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PlaneTimeout(f"no data from rank(s) {sorted(peers - set(got))} "
                                       f"within {timeout:g} s")
                self._cond.wait(left)

    def drop(self, token: str) -> None:
        """Forget an operation's arrays, of every round."""
        with self._cond:
            for key in [k for k in self._items if k == token or k.startswith(f"{token}#")]:
                del self._items[key]


class CommTransport:
    """Exchange over the cluster's comm: one message per peer with all its pieces."""

    name = "comm"

    def __init__(self, worker, inbox: Inbox, token: str, group: list, rank: int, timeout: float):
        self.worker, self.inbox, self.token = worker, inbox, token
        self.group, self.rank, self.timeout = group, rank, timeout
        self.rounds = 0

    def exchange(self, sends: dict, expect: dict) -> dict:
        from distributed.protocol import to_serialize

        # each round under a tag of its own: a fast peer's next round may arrive before
        # this rank has taken its previous one
        tag, self.rounds = f"{self.token}#{self.rounds}", self.rounds + 1

        async def send_all():
            await asyncio.gather(*(
                self.worker.rpc(self.group[peer]).hpcgpu_plane_shards(
                    token=tag, src=self.rank, arrays=[to_serialize(a) for a in arrays])
                for peer, arrays in sends.items() if arrays))

        future = asyncio.run_coroutine_threadsafe(send_all(), self.worker.loop.asyncio_loop)
        peers = {p for p, shapes in expect.items() if shapes}
        got = self.inbox.take(tag, peers, self.timeout)
        try:
            future.result(self.timeout)
        except TimeoutError:
            future.cancel()
            raise PlaneTimeout(f"sending to rank(s) {sorted(p for p, a in sends.items() if a)} did not "
                               f"finish within {self.timeout:g} s") from None
        return {p: got.get(p, []) for p in expect}

    def abort(self) -> None:
        self.inbox.drop(self.token)


def _layout(shapes: list) -> tuple[list[int], int]:
    """Byte offsets of packed pieces, each aligned, and the buffer's size."""
    offsets, end = [], 0
    for shape, dtype in shapes:
        offsets.append(end)
        end += -(-prod(shape) * np.dtype(dtype).itemsize // _ALIGN) * _ALIGN
    return offsets, end


def _views(buf, shapes: list, offsets: list) -> list:
    return [buf[o:o + prod(s) * np.dtype(d).itemsize].view(d).reshape(s)
            for (s, d), o in zip(shapes, offsets)]


class NcclTransport:
    """Exchange through an NCCL communicator: one packed buffer per peer each way, all
    sends and receives in one NCCL group on a stream of their own."""

    name = "nccl"

    def __init__(self, comm, rank: int, timeout: float):
        self.comm, self.rank, self.timeout = comm, rank, timeout

    def exchange(self, sends: dict, expect: dict) -> dict:
        import cupy
        from cupy.cuda import nccl

        # Buffers are made and packed on the caller's stream, so the packing runs after the
        # kernels that produced the pieces, and a buffer's memory goes back to the pool on the
        # stream that reads it. NCCL's own stream starts once that work is done.
        send_bufs = {p: self._pack(arrays) for p, arrays in sends.items() if arrays}
        recv = {}
        for p, shapes in expect.items():
            offsets, size = _layout(shapes)
            recv[p] = (cupy.empty(size, dtype=cupy.uint8), offsets)
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.wait_event(cupy.cuda.get_current_stream().record())
        nccl.groupStart()
        for p, buf in send_bufs.items():
            self.comm.send(buf.data.ptr, buf.size, nccl.NCCL_UINT8, p, stream.ptr)
        for p, (buf, _) in recv.items():
            if buf.size:
                self.comm.recv(buf.data.ptr, buf.size, nccl.NCCL_UINT8, p, stream.ptr)
        nccl.groupEnd()
        self._wait(stream, sum(b.size for b in send_bufs.values()))
        return {p: _views(buf, expect[p], offsets) for p, (buf, offsets) in recv.items()}

    @staticmethod
    def _pack(arrays: list):
        import cupy

        shapes = [(a.shape, a.dtype) for a in arrays]
        offsets, size = _layout(shapes)
        buf = cupy.empty(size, dtype=cupy.uint8)
        for view, a in zip(_views(buf, shapes, offsets), arrays):
            view[...] = cupy.asarray(a)
        return buf

    def _wait(self, stream, nbytes: int) -> None:
        """Poll the stream; past the deadline, abort the communicator (its kernels stop)."""
        deadline = time.monotonic() + self.timeout + nbytes / 5e9
        while not stream.done:
            self.comm.check_async_error()
            if time.monotonic() > deadline:
                self.abort()
                raise PlaneTimeout(f"NCCL exchange did not finish within {self.timeout:g} s "
                                   "(a peer died or stalled); communicator aborted")
            time.sleep(0.0002)

    def abort(self) -> None:
        self.comm.abort()
