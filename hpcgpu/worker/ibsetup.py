"""Before a worker starts on a compute host: the InfiniBand port behind its interface.

Each host finds its own HCA port (``ib0`` may be ``mlx5_0:1`` on one node and ``mlx5_2:1`` on
another), so ``UCX_NET_DEVICES`` is set here, per host, not in the job script. A port that is
not ACTIVE stops the worker with a ``NetworkCheckError`` naming host, port and fix; an interface
without an HCA (Ethernet, a veth) changes nothing. The decisions are
:func:`hpcgpu.network.ib.plan`'s, tested on real tool outputs.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import MutableMapping

from hpcgpu.network.ib import IBPlan, interface_port, plan, wants_infiniband
from hpcgpu.worker.reach import NetworkCheckError

__all__ = ["use_infiniband_port", "ucx_transports"]

_UCX_SCHEMES = ("ucx", "ucxx", "ucx+auth")


def ucx_transports() -> dict[str, list[str]] | None:
    """Transport -> devices of the UCX that ucxx loads (``ucx_info -d``), ``None`` without ucx_info."""
    from hpcgpu.network.probes import _run, _ucx_info_argv, parse_ucx_info

    found = _ucx_info_argv()
    if found is None:
        return None
    argv, env = found
    code, devices = _run(argv + ["-d"], env=env, timeout=60)
    return parse_ucx_info("", devices)["transports"] if code == 0 else None


def _pinned_elsewhere(environ: MutableMapping[str, str]) -> bool:
    """Whether the user chose the devices or kept UCX off the HCA (``UCX_TLS=tcp``...)."""
    import dask

    if "UCX_NET_DEVICES" in environ or dask.config.get("distributed-ucxx.environment.net-devices", None):
        return True
    return not wants_infiniband(environ.get("UCX_TLS"), dask.config.get("distributed-ucxx.infiniband", None))


def use_infiniband_port(interface: str | None, protocol: str | None, sys_root: str = "/sys",
                        environ: MutableMapping[str, str] | None = None,
                        transports=ucx_transports) -> IBPlan | None:
    """Raise :class:`NetworkCheckError` when the HCA port behind ``interface`` is not ACTIVE;
    with UCX, set ``UCX_NET_DEVICES`` to that port when this UCX has a transport on it.

    Returns the plan (``None`` without an interface or without an HCA behind it).
    """
    environ = os.environ if environ is None else environ
    if not interface:
        return None
    port = interface_port(interface, sys_root)
    if port is None:
        return None
    host = socket.gethostname()
    if not port.active:
        what, fix = plan(interface, host, port, None).problem
        raise NetworkCheckError(f"{what}: {fix}")
    if (protocol or "").lower() not in _UCX_SCHEMES or _pinned_elsewhere(environ):
        return plan(interface, host, port, None)
    chosen = plan(interface, host, port, transports())
    if chosen.net_devices:
        environ["UCX_NET_DEVICES"] = chosen.net_devices
    print(f"hpcgpu.worker: {chosen.note}", file=sys.stderr, flush=True)
    return chosen
