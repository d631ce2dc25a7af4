"""``ucx+auth://``: distributed-ucxx with a mutual challenge-response on every connection.

distributed-ucxx has no TLS, so a UCX listener accepts any process that can reach it,
another user's on the same node included. This backend runs, on each fresh UCX endpoint
and before distributed reads any message from it, an HMAC-SHA256 challenge-response in
fixed-size raw frames: each side proves it holds the cluster's secret, with a fresh
random nonce from each side so that no proof can be replayed. A peer that fails is cut
off (the endpoint is aborted) without a single byte of it being deserialised.

The secret is the content of a file that only its owner can read (``hpcgpu.ucx-auth.key-file``
in dask config, ``DASK_HPCGPU__UCX_AUTH__KEY_FILE``: the environment carries the path,
never the key): a random token (:func:`write_key_file`, :func:`temporary_key`) or the
cluster's TLS key file. UCX traffic is authenticated but **not encrypted**. ucxx's Python API binds the listener
on every address whatever it was asked; a socket filter then admits only connections to the
asked address (:mod:`hpcgpu.network.bindfilter`; docs/security.md, "Why every interface").

The backend reaches distributed through its comm backend registry by the entry point
``distributed.comm.backends: ucx+auth`` (pyproject.toml), loaded the first time a process
meets a ``ucx+auth://`` address; importing hpcgpu registers nothing. :func:`register` does
the same in this process where there is no such metadata (a source tree on ``PYTHONPATH``):
the processes hpcgpu starts call it (:mod:`hpcgpu.network.schemes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Iterator

import dask.config
from distributed.comm.core import CommClosedError, FatalCommClosedError

from hpcgpu.network.bindfilter import admit_only
from hpcgpu.system import leftovers

__all__ = ["SCHEME", "CONFIG_KEY", "read_key", "write_key_file", "temporary_key", "key_for", "register",
           "client_proof", "server_proof", "UCXAuthBackend"]

SCHEME = "ucx+auth"
_PREFIX = SCHEME + "://"
CONFIG_KEY = "hpcgpu.ucx-auth.key-file"
#: seconds a new connection has to complete the exchange
HANDSHAKE_TIMEOUT = 10.0
logger = logging.getLogger("hpcgpu.network")
MAGIC = b"HPCGUA01"  # protocol name and version, first bytes of both challenge frames
NONCE = 32
MAC = 32
CHALLENGE = len(MAGIC) + NONCE            # server -> client: magic, server nonce
RESPONSE = len(MAGIC) + NONCE + MAC       # client -> server: magic, client nonce, client proof
VERDICT = 1 + MAC                         # server -> client: accepted?, server proof
MIN_KEY_BYTES = 16


def read_key(path: str | os.PathLike | None = None) -> bytes:
    """The cluster's secret, derived from the key file (``hpcgpu.ucx-auth.key-file`` by default).

    Raises
    ------
    ValueError
        No key file is configured, or it is not a regular file of this user that only
        this user can read, or it is shorter than 16 bytes; the message says the fix.
    """
    path = path or dask.config.get(CONFIG_KEY, None)
    if not path:
        raise ValueError(
            f"protocol {SCHEME!r} needs the cluster's secret: set dask config {CONFIG_KEY!r} "
            "(DASK_HPCGPU__UCX_AUTH__KEY_FILE) to a file of yours with mode 0600 in every "
            "process of the cluster (hpcgpu.network.ucxauth.temporary_key() makes one)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise ValueError(
                f"{CONFIG_KEY}={str(path)!r} must be a regular file of this user readable by "
                f"no one else (it is mode {oct(stat.S_IMODE(info.st_mode))}, uid {info.st_uid}): "
                f"chmod 600 {path}")
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    if len(data) < MIN_KEY_BYTES:
        raise ValueError(f"{CONFIG_KEY}={str(path)!r} holds {len(data)} bytes: a key needs at "
                         f"least {MIN_KEY_BYTES} (write_key_file() writes 64 random hex digits)")
    return hmac.new(data, b"hpcgpu ucx+auth v1 secret", hashlib.sha256).digest()


def write_key_file(directory: str | os.PathLike) -> Path:
    """A new random key in ``directory/ucx-auth.key``, mode 0600 (the file must not exist)."""
    path = Path(directory) / "ucx-auth.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


@contextlib.contextmanager
def temporary_key(directory: str | os.PathLike | None = None) -> Iterator[Path]:
    """A random key in a new 0700 directory, set as ``hpcgpu.ucx-auth.key-file`` (and in
    ``os.environ`` for child processes) while the context lasts; removed at its end, and
    also when the process dies first (SIGTERM, SIGKILL: :mod:`hpcgpu.system.leftovers`).

    ``directory``: where to make it (on a shared filesystem for workers on other nodes).
    """
    folder = Path(tempfile.mkdtemp(prefix="hpcgpu-ucx-auth-", dir=directory))  # mode 0700
    env = "DASK_HPCGPU__UCX_AUTH__KEY_FILE"
    previous = os.environ.get(env)
    try:
        leftovers.remove_at_end(folder)  # first: a SIGTERM from here on leaves nothing
        path = write_key_file(folder)
        os.environ[env] = str(path)
        with dask.config.set({CONFIG_KEY: str(path)}):
            yield path
    finally:
        if previous is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = previous
        shutil.rmtree(folder, ignore_errors=True)
        leftovers.forget(folder)


def key_for(protocol: str | None, directory: str | os.PathLike | None = None):
    """:func:`temporary_key` in ``directory`` when ``protocol`` is ``ucx+auth``; else nothing.

    Examples
    --------
    >>> with key_for("tls") as path:
    ...     path is None
    True
    """
    if (protocol or "").lower().split("://")[0] != SCHEME:
        return contextlib.nullcontext()
    return temporary_key(directory)


def client_proof(key: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The connecting side's proof; the role label keeps it from being reflected."""
    return hmac.new(key, b"client" + server_nonce + client_nonce, hashlib.sha256).digest()


def server_proof(key: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The listening side's proof, over both nonces."""
    return hmac.new(key, b"server" + server_nonce + client_nonce, hashlib.sha256).digest()


async def _recv(ep, size: int) -> bytes:
    buffer = bytearray(size)
    await ep.recv(buffer)
    return bytes(buffer)


async def authenticate_listener_side(ep, key: bytes) -> None:
    """Challenge the peer; raise :class:`CommClosedError` unless it proves the key."""
    server_nonce = secrets.token_bytes(NONCE)
    await ep.send(MAGIC + server_nonce)
    response = await _recv(ep, RESPONSE)
    magic, client_nonce, mac = response[:8], response[8:8 + NONCE], response[8 + NONCE:]
    valid = magic == MAGIC and hmac.compare_digest(mac, client_proof(key, server_nonce, client_nonce))
    if not valid:
        await ep.send(b"\0" + bytes(MAC))  # tell an honest peer with the wrong key, then cut
        raise CommClosedError(f"{SCHEME}: a peer did not prove it holds the cluster's secret")
    await ep.send(b"\1" + server_proof(key, server_nonce, client_nonce))


async def authenticate_connector_side(ep, key: bytes, address: str) -> None:
    """Answer the listener's challenge and check its proof; raise
    :class:`FatalCommClosedError` (no retry: the key will not change) when either fails."""
    challenge = await _recv(ep, CHALLENGE)
    if challenge[:8] != MAGIC:
        raise FatalCommClosedError(f"{address} is not a {SCHEME} listener (plain ucx:// or another protocol)")
    server_nonce, client_nonce = challenge[8:], secrets.token_bytes(NONCE)
    await ep.send(MAGIC + client_nonce + client_proof(key, server_nonce, client_nonce))
    verdict = await _recv(ep, VERDICT)
    if verdict[:1] != b"\1":
        raise FatalCommClosedError(
            f"{address} refused this process's key: it does not hold the cluster's secret "
            f"(check {CONFIG_KEY}, DASK_HPCGPU__UCX_AUTH__KEY_FILE, in this process)")
    if not hmac.compare_digest(verdict[1:], server_proof(key, server_nonce, client_nonce)):
        raise FatalCommClosedError(f"{address} did not prove it holds the cluster's secret: not this cluster's")


async def _bounded(coroutine, comm, what: str) -> None:
    """Run one side of the exchange within HANDSHAKE_TIMEOUT; abort the endpoint on any failure."""
    try:
        await asyncio.wait_for(coroutine, HANDSHAKE_TIMEOUT)
    except CommClosedError:
        comm.abort()
        raise
    except asyncio.TimeoutError:
        comm.abort()
        raise CommClosedError(f"{SCHEME}: {what} did not complete within {HANDSHAKE_TIMEOUT} s") from None
    except Exception as exc:  # UCX errors: the peer went away or sent a frame of another size
        comm.abort()
        raise CommClosedError(f"{SCHEME}: {what} failed ({type(exc).__name__}: {exc})") from exc


def keep_to_asked_address(host: str, port: int, address: str) -> bool:
    """ucxx binds the listener on every address: admit only connections to the asked one
    (:func:`hpcgpu.network.bindfilter.admit_only`); whether it could. Every address asked
    for (``""``, ``0.0.0.0``) needs nothing."""
    if host in ("", "0.0.0.0", "::", "*"):
        return True
    try:
        wanted = socket.gethostbyname(host)  # "localhost", a host name: its IPv4 address
    except OSError:
        wanted = host
    if admit_only(port, wanted):
        return True
    logger.warning("%s: listens on every address of this host, not only %s (ucxx takes no address, "
                   "and port %d is no IPv4 TCP listener of this process)", address, host, port)
    return False


def _as_ucx(address: str) -> str:
    return "ucx://" + address[len(_PREFIX):] if address.startswith(_PREFIX) else address


def _as_auth(address: str) -> str:
    return _PREFIX + address.split("://", 1)[1] if address else address


@functools.lru_cache(maxsize=1)
def _classes():
    """The backend classes, built on distributed-ucxx's only when the scheme is used."""
    from distributed_ucxx.ucxx import UCXX, UCXXBackend, UCXXConnector, UCXXListener

    class UCXAuthComm(UCXX):
        def __init__(self, ep, local_addr, peer_addr, deserialize=True, enable_close_callback=False):
            # distributed-ucxx asserts a ucx:// prefix; this comm's addresses carry ours.
            super().__init__(ep, _as_ucx(local_addr), _as_ucx(peer_addr), deserialize, enable_close_callback)
            self._local_addr, self._peer_addr = _as_auth(self._local_addr), _as_auth(self._peer_addr)

    class UCXAuthConnector(UCXXConnector):
        comm_class = UCXAuthComm

        async def connect(self, address, deserialize=True, **connection_args):
            key = read_key()
            comm = await super().connect(address, deserialize=deserialize, **connection_args)
            await _bounded(authenticate_connector_side(comm.ep, key, _PREFIX + address), comm,
                           f"authenticating to {_PREFIX + address}")
            return comm

    UCXAuthConnector.prefix = _PREFIX

    class UCXAuthListener(UCXXListener):
        comm_class = UCXAuthComm

        async def start(self):
            self._key = read_key()  # no key, no listener: fail at start with the fix
            await super().start()
            keep_to_asked_address(self.ip, self.port, self.address)

        async def on_connection(self, comm, handshake_overrides=None):
            try:
                await _bounded(authenticate_listener_side(comm.ep, self._key), comm, "a new connection's proof")
            except CommClosedError as exc:  # distributed-ucxx drops it silently: say so once
                logger.warning("%s: connection refused: %s", self.address, exc)
                raise
            await super().on_connection(comm, handshake_overrides)

    UCXAuthListener.prefix = _PREFIX

    class Backend(UCXXBackend):
        def get_connector(self):
            return UCXAuthConnector()

        def get_listener(self, loc, handle_comm, deserialize, **connection_args):
            return UCXAuthListener(loc, handle_comm, deserialize, **connection_args)

    return Backend


def UCXAuthBackend():  # noqa: N802 - the entry point names a factory, as a class would be
    """The ``ucx+auth`` backend (what the ``distributed.comm.backends`` entry point loads)."""
    return _classes()()


def register() -> None:
    """Put the backend into distributed's registry in this process, if it is not there
    (distributed-ucxx is imported when the scheme is first used: not here)."""
    from distributed.comm.registry import backends

    backends.setdefault(SCHEME, _OnFirstUse())


class _OnFirstUse:
    """The backend, built (distributed-ucxx imported) when distributed first asks it something."""

    def __getattr__(self, name):
        return getattr(UCXAuthBackend(), name)  # the classes are built once (_classes)
