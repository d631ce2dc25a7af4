"""The communication settings of one hpcgpu cluster, as one frozen, validated value.

Scheduler, workers and client must agree on the protocol and on the UCX transports, and
the scheduler and the workers often sit on different networks (a login node's ``eth0``,
compute nodes' ``ib0``: dask-jobqueue#371, #382), so the interface is set per role.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = ["NetworkSettings", "PROTOCOLS", "TRANSPORTS", "UCX_PROTOCOLS", "FALLBACK_PROTOCOLS"]

#: Protocols hpcgpu speaks; ``ucx`` and ``ucxx`` both name distributed-ucxx's backend,
#: ``ucx+auth`` the same with a challenge-response on every connection (hpcgpu.network.ucxauth).
PROTOCOLS = ("tcp", "tls", "ucx", "ucxx", "ucx+auth")
UCX_PROTOCOLS = ("ucx", "ucxx", "ucx+auth")
#: Protocols to fall back to when UCX cannot be loaded.
FALLBACK_PROTOCOLS = ("tcp", "tls")
#: Explicit UCX transports (``tcp`` is TCP over UCX); none given means UCX picks (auto).
TRANSPORTS = ("infiniband", "nvlink", "rdmacm", "tcp")
_ALIASES = {
    "ib": "infiniband", "rc": "infiniband", "verbs": "infiniband",
    "cuda_ipc": "nvlink", "cuda-ipc": "nvlink",
    "rdma-cm": "rdmacm", "rdma_cm": "rdmacm",
    "tcp-over-ucx": "tcp", "tcp_over_ucx": "tcp",
}
_TOKEN = re.compile(r"[A-Za-z0-9_.:@+,/-]+")
_UCX_NAME = re.compile(r"UCX_[A-Z0-9_]+")


def _normalise_transports(transports: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if transports is None or transports == "auto":
        return None
    items = transports.split(",") if isinstance(transports, str) else list(transports)
    names = [_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in items if t.strip()]
    if not names or names == ["auto"]:
        return None
    order = lambda t: (TRANSPORTS.index(t) if t in TRANSPORTS else len(TRANSPORTS), t)  # noqa: E731
    return tuple(sorted(set(names), key=order))


def _ucx_variable(name: str) -> str:
    """``rndv-scheme`` or ``UCX_RNDV_SCHEME`` -> ``UCX_RNDV_SCHEME``."""
    name = name.strip()
    if not name.upper().startswith("UCX_"):
        name = "UCX_" + name
    return name.upper().replace("-", "_")


@dataclass(frozen=True)
class NetworkSettings:
    """How scheduler, workers and client talk to each other.

    Build it with :meth:`create` (which accepts the friendly forms); construction
    validates either way.

    Attributes
    ----------
    protocol : {"tcp", "tls", "ucx", "ucxx"}
        What the workers (and the scheduler) listen on. ``ucx``/``ucxx`` use
        distributed-ucxx.
    transports : tuple of str or None
        UCX transports: ``None`` lets UCX choose (auto: NVLink, InfiniBand, shared memory
        where present); otherwise some of ``infiniband``, ``nvlink``, ``rdmacm`` and
        ``tcp`` (TCP over UCX).
    scheduler_interface, worker_interface : str or None
        Network interface each role listens on (``ib0``, ``eth0``, ``lo``); ``None``:
        the host's default address.
    net_devices : str or None
        ``UCX_NET_DEVICES``: the devices UCX may use (``mlx5_0:1``); ``None``: all.
    client_protocol : str or None
        A second scheduler listener for the client, when it cannot speak UCX (a login
        node without InfiniBand reaching a scheduler that runs in a job): ``tcp`` or ``tls``.
    fallback : str or None
        When UCX cannot be loaded, use this protocol (``tcp``/``tls``) with a warning,
        instead of failing.
    ucx_environment : tuple of (str, str)
        More ``UCX_*`` variables, e.g. ``(("UCX_RNDV_SCHEME", "get_zcopy"),)``.

    Examples
    --------
    >>> s = NetworkSettings.create("ucx", transports="ib,nvlink", interface="ib0")
    >>> s.transports, s.scheduler_interface, s.worker_interface, s.is_ucx
    (('infiniband', 'nvlink'), 'ib0', 'ib0', True)
    >>> NetworkSettings.create("ucx", transports="rdmacm")
    Traceback (most recent call last):
    ...
    ValueError: transports=('rdmacm',): RDMA CM sets up InfiniBand connections; add 'infiniband' (transports='infiniband,rdmacm')
    """

    protocol: str = "tcp"
    transports: tuple[str, ...] | None = None
    scheduler_interface: str | None = None
    worker_interface: str | None = None
    net_devices: str | None = None
    client_protocol: str | None = None
    fallback: str | None = None
    ucx_environment: tuple[tuple[str, str], ...] = ()

    @classmethod
    def create(
        cls,
        protocol: str = "tcp",
        transports: str | Iterable[str] | None = "auto",
        interface: str | None = None,
        *,
        scheduler_interface: str | None = None,
        worker_interface: str | None = None,
        net_devices: str | None = None,
        client_protocol: str | None = None,
        fallback: str | bool | None = None,
        ucx_environment: Mapping[str, object] | Iterable[tuple[str, object]] | None = None,
    ) -> "NetworkSettings":
        """Normalise friendly input: ``"ucx://"``, ``"ib,nvlink"``, ``interface`` for both
        roles, ``fallback=True`` (= ``"tcp"``), a dict of UCX variables.

        Examples
        --------
        >>> NetworkSettings.create("UCX://", interface="eth0", worker_interface="ib0",
        ...                        fallback=True, ucx_environment={"rndv-scheme": "get_zcopy"})
        ... # doctest: +NORMALIZE_WHITESPACE
        NetworkSettings(protocol='ucx', transports=None, scheduler_interface='eth0',
            worker_interface='ib0', net_devices=None, client_protocol=None, fallback='tcp',
            ucx_environment=(('UCX_RNDV_SCHEME', 'get_zcopy'),))
        """
        protocol = (protocol or "tcp").strip().lower().removesuffix("://")
        if fallback is True:
            fallback = "tcp"
        env = ucx_environment.items() if isinstance(ucx_environment, Mapping) else (ucx_environment or ())
        return cls(
            protocol=protocol,
            transports=_normalise_transports(transports),
            scheduler_interface=scheduler_interface or interface,
            worker_interface=worker_interface or interface,
            net_devices=net_devices,
            client_protocol=client_protocol.lower().removesuffix("://") if client_protocol else None,
            fallback=fallback or None,
            ucx_environment=tuple((_ucx_variable(k), str(v)) for k, v in env),
        )

    def __post_init__(self) -> None:
        self._check_protocols()
        self._check_transports()
        for field in ("scheduler_interface", "worker_interface", "net_devices"):
            value = getattr(self, field)
            if value is not None and not _TOKEN.fullmatch(value):
                raise ValueError(f"{field}={value!r} is not an interface/device name (e.g. 'ib0', 'mlx5_0:1')")
        for name, _ in self.ucx_environment:
            if not _UCX_NAME.fullmatch(name):
                raise ValueError(f"ucx_environment name {name!r} is not a UCX variable (e.g. UCX_RNDV_SCHEME)")
            if name == "UCX_TLS" and self.transports is not None:
                raise ValueError(
                    f"ucx_environment sets UCX_TLS and transports={self.transports!r} sets it too: "
                    "give one of them"
                )

    def _check_protocols(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"protocol={self.protocol!r} is not supported: use one of {', '.join(PROTOCOLS)} "
                "(ucx and ucxx both mean distributed-ucxx; ucx+auth authenticates each connection)"
            )
        for field in ("client_protocol", "fallback"):
            value = getattr(self, field)
            if value is not None and value not in FALLBACK_PROTOCOLS:
                raise ValueError(f"{field}={value!r} must be 'tcp' or 'tls' (or None)")
        if self.client_protocol and not self.is_ucx:
            raise ValueError(
                f"client_protocol={self.client_protocol!r} adds a second scheduler listener for a "
                f"client that cannot speak UCX; with protocol={self.protocol!r} the client already "
                "uses that: leave client_protocol=None"
            )

    def _check_transports(self) -> None:
        if self.transports is None:
            return
        if not self.is_ucx:
            raise ValueError(
                f"transports={self.transports!r} choose UCX transports, but protocol={self.protocol!r}: "
                "use protocol='ucx' or leave transports='auto'"
            )
        unknown = [t for t in self.transports if t not in TRANSPORTS]
        if unknown:
            raise ValueError(
                f"transports: unknown {', '.join(map(repr, unknown))}: use 'auto' or some of "
                f"{', '.join(TRANSPORTS)} (e.g. transports='infiniband,nvlink')"
            )
        if "rdmacm" in self.transports and "infiniband" not in self.transports:
            raise ValueError(
                f"transports={self.transports!r}: RDMA CM sets up InfiniBand connections; add "
                "'infiniband' (transports='infiniband,rdmacm')"
            )

    @property
    def is_ucx(self) -> bool:
        """Whether the protocol is UCX (``ucx`` or ``ucxx``)."""
        return self.protocol in UCX_PROTOCOLS

    @property
    def auto(self) -> bool:
        """Whether UCX chooses its transports itself."""
        return self.transports is None
