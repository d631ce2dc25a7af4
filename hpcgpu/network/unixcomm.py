"""``unix://``: distributed's comm over a Unix socket that only its owner can reach.

Workers of one machine (``LocalGPUCluster``) move chunks between processes of one user on
one kernel. TLS there guards a link nobody else can see, at a cost: each 16 KiB record is
encrypted by the sender's event loop and decrypted by the receiver's, which halves what
two workers exchange (docs/performance.md). This backend gives the same guarantee — only
the cluster's own user reaches a listener, and nobody else reads the traffic — from the
kernel instead of a certificate:

- each listener's socket lies in a fresh directory of mode 0700 (``tempfile.mkdtemp``),
  which another user cannot enter, so cannot connect to the socket either (removed with
  the listener, or when the process dies first: :mod:`hpcgpu.system.leftovers`);
- both ends check the other's user id from the kernel (``SO_PEERCRED``) and hang up on any
  other user before a byte is read: a socket planted at a path by someone else is refused;
- the bytes never leave the kernel, so there is nothing on a wire to encrypt.

So the backend counts as encrypted for ``require_encryption`` (the TLS clusters' default).
It carries distributed's own TCP comm (framing, serialisation, offload) over the socket.

The backend reaches distributed by the entry point ``distributed.comm.backends: unix``
(pyproject.toml), loaded the first time a process meets a ``unix://`` address; importing
hpcgpu registers nothing. :func:`register` puts it in the registry of a process that runs
hpcgpu from a source tree without package metadata (``PYTHONPATH``): the processes hpcgpu
starts call it (:mod:`hpcgpu.network.schemes`).

Examples
--------
>>> UnixBackend().get_address_host("/tmp/hpcgpu-x/comm.sock")
'127.0.0.1'
>>> is_socket_path("/tmp/hpcgpu-x/comm.sock"), is_socket_path("127.0.0.1:0")
(True, False)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import socket
import struct
import tempfile
import weakref

from distributed.comm.core import BaseListener, Comm, CommClosedError, Connector, FatalCommClosedError
from distributed.comm.registry import Backend
from distributed.comm.tcp import MAX_BUFFER_SIZE, TCP, _close_comm, convert_stream_closed_error
from tornado import netutil
from tornado.iostream import IOStream, StreamClosedError

from hpcgpu.system import leftovers

__all__ = ["SCHEME", "UnixBackend", "is_socket_path", "peer_uid", "register"]

SCHEME = "unix"
PREFIX = f"{SCHEME}://"
HOST = "127.0.0.1"  # what distributed groups by host: this machine, as the loopback TLS cluster
SOCKET_NAME = "comm.sock"
#: bytes of each socket's send and receive buffer (the kernel caps it at net.core.wmem_max
#: and rmem_max); None: the kernel's default (net.core.wmem_default, often 208 KiB)
SOCKET_BUFFER: int | None = 4 << 20
logger = logging.getLogger("hpcgpu.network")


def is_socket_path(loc: str) -> bool:
    """Whether ``loc`` names a socket (an absolute path) rather than a ``host:port`` to
    start a new listener at (what distributed builds from ``host=`` and ``protocol=``)."""
    return loc.startswith("/")


def peer_uid(sock: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a connected Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def _sized(sock: socket.socket) -> socket.socket:
    if SOCKET_BUFFER:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    return sock


def _refuse_stranger(sock: socket.socket, where: str) -> int:
    """The peer's pid; :class:`FatalCommClosedError` if it runs as another user."""
    pid, uid = peer_uid(sock)
    if uid != os.geteuid():
        raise FatalCommClosedError(f"{where}: the peer (pid {pid}) runs as uid {uid}, not as "
                                   f"this cluster's user ({os.geteuid()}); refused")
    return pid


class UnixComm(TCP):
    """distributed's TCP comm on a Unix socket: the same framing and (de)serialisation.

    ``TCP.__init__`` also sets TCP_NODELAY (a no-op here) and TCP keep-alive probes, which a
    Unix socket refuses with an error logged on every connection; a dead peer shows as
    end-of-file at once. So this sets up exactly what ``TCP.__init__`` does but those."""

    def __init__(self, stream: IOStream, local_addr: str, peer_addr: str, deserialize: bool = True):
        Comm.__init__(self, deserialize=deserialize)
        self._closed = False
        self._local_addr = local_addr
        self._peer_addr = peer_addr
        self.stream = stream
        self._finalizer = weakref.finalize(self, self._get_finalizer())
        self._finalizer.atexit = False
        self._extra: dict = {}
        stream.set_close_callback(functools.partial(_close_comm, weakref.ref(self)))


class UnixConnector(Connector):
    """Connects to a listener's socket and checks that its owner is this user."""

    async def connect(self, address, deserialize=True, **connection_args):
        if not is_socket_path(address):
            raise ValueError(f"{PREFIX}{address}: a unix address names a socket path")
        stream = IOStream(_sized(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
                          max_buffer_size=MAX_BUFFER_SIZE)
        try:
            await stream.connect(address)
        except StreamClosedError as e:
            convert_stream_closed_error(self, e)
        try:
            pid = _refuse_stranger(stream.socket, PREFIX + address)
        except FatalCommClosedError:
            stream.close()
            raise
        return UnixComm(stream, f"{PREFIX}pid{os.getpid()}", f"{PREFIX}{address}#pid{pid}", deserialize)


class UnixListener(BaseListener):
    """Listens on a socket in a fresh private directory (or at the path given)."""

    prefix = PREFIX  # distributed's worker logs ``prefix + host`` as where it listens

    def __init__(self, loc: str, comm_handler, deserialize=True, allow_offload=True,
                 handshake_overrides=None, **connection_args):
        super().__init__()
        self.comm_handler = comm_handler
        self.deserialize = deserialize
        self.allow_offload = allow_offload
        self.handshake_overrides = handshake_overrides
        self._given = loc if is_socket_path(loc) else None
        self.path: str | None = None
        self._directory: str | None = None
        self._socket: socket.socket | None = None
        self._stop_accepting = None

    async def start(self):
        if self._given is None:
            self._directory = tempfile.mkdtemp(prefix="hpcgpu-")  # mode 0700, this user's
            leftovers.remove_at_end(self._directory)  # also if this process dies of SIGTERM
            self.path = os.path.join(self._directory, SOCKET_NAME)
        else:
            self.path = self._given
        self._socket = netutil.bind_unix_socket(self.path, mode=0o600)
        self._stop_accepting = netutil.add_accept_handler(self._socket, self._accept)

    def _accept(self, connection: socket.socket, _address) -> None:
        try:
            pid = _refuse_stranger(connection, self.contact_address)
        except FatalCommClosedError as e:
            logger.warning("%s", e)
            connection.close()
            return
        stream = IOStream(_sized(connection), max_buffer_size=MAX_BUFFER_SIZE)
        comm = UnixComm(stream, self.contact_address, f"{PREFIX}pid{pid}", self.deserialize)
        comm.allow_offload = self.allow_offload
        asyncio.ensure_future(self._handle(comm))

    async def _handle(self, comm) -> None:
        try:
            await self.on_connection(comm, self.handshake_overrides)
        except CommClosedError:
            logger.info("Connection to %s closed before handshake completed", self.contact_address)
            return
        await self.comm_handler(comm)

    def stop(self):
        stop, self._stop_accepting = self._stop_accepting, None
        if stop is not None:
            stop()
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            leftovers.forget(self._directory)
        elif self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    @property
    def listen_address(self) -> str:
        if self.path is None:
            raise ValueError("invalid operation on a unix listener that has not started")
        return PREFIX + self.path

    @property
    def contact_address(self) -> str:
        return self.listen_address


class UnixBackend(Backend):
    """distributed's comm backend for ``unix://<socket path>``."""

    def get_connector(self):
        return UnixConnector()

    def get_listener(self, loc, handle_comm, deserialize, **connection_args):
        return UnixListener(loc, handle_comm, deserialize, **connection_args)

    def get_address_host(self, loc):
        return HOST

    def get_address_host_port(self, loc):
        raise ValueError(f"{PREFIX}{loc} has no port: a unix address names a socket path")

    def resolve_address(self, loc):
        return loc

    def get_local_address_for(self, loc):
        return f"{PREFIX}pid{os.getpid()}"


def register() -> None:
    """Put the backend into distributed's registry in this process, if it is not there."""
    from distributed.comm.registry import backends

    backends.setdefault(SCHEME, UnixBackend())
