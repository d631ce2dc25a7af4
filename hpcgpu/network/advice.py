"""When UCX would pay: one log line where it would and is not chosen, and the fallback
of a UCX protocol that cannot start here.

TLS stays the default (distributed-ucxx has no TLS: a plain UCX listener accepts any local
user). Where GPUs share NVLink or nodes have active InfiniBand ports and distributed-ucxx
is installed, :func:`log_ucx_hint` says so once per cluster, with how to choose UCX. The
decision is a pure function of the facts (:func:`ucx_hint`), tested on real
``nvidia-smi topo -m`` outputs.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable

__all__ = ["FastLinks", "nvlink_pairs", "active_ports", "ucx_hint", "host_links", "log_ucx_hint",
           "local_protocol"]

logger = logging.getLogger("hpcgpu.network")

#: schemes that go through distributed-ucxx
UCX_SCHEMES = ("ucx", "ucxx", "ucx+auth")


@dataclass(frozen=True)
class FastLinks:
    """What this host offers UCX.

    Attributes
    ----------
    ucx_missing : str or None
        Why distributed-ucxx cannot load here; ``None`` when it can.
    nvlink : tuple of str
        GPU pairs joined by NVLink, as ``"0-1 NV18"``.
    infiniband : tuple of str
        Active InfiniBand/RoCE ports, as ``"mlx5_0:1"``.
    """

    ucx_missing: str | None
    nvlink: tuple[str, ...] = ()
    infiniband: tuple[str, ...] = ()


def nvlink_pairs(topo_text: str) -> tuple[str, ...]:
    """GPU pairs joined by NVLink in ``nvidia-smi topo -m`` output.

    Examples
    --------
    >>> nvlink_pairs("\\tGPU0\\tGPU1\\tGPU2\\nGPU0\\t X \\tNV18\\tSYS\\nGPU1\\tNV18\\t X \\tPHB\\nGPU2\\tSYS\\tPHB\\t X ")
    ('0-1 NV18',)
    """
    from hpcgpu.network.probes import parse_topo

    return tuple(f"{pair} {kind}" for pair, kind in parse_topo(topo_text).items() if kind.startswith("NV"))


def active_ports(infiniband: dict) -> tuple[str, ...]:
    """Active ports of :func:`hpcgpu.network.probes.probe_infiniband`'s facts."""
    return tuple(f"{d['device']}:{p['port']}" for d in infiniband.get("devices", ())
                 for p in d["ports"] if (p.get("state") or "").endswith("ACTIVE"))


def ucx_hint(protocol: str | None, links: FastLinks, how: str, across_nodes: bool = True) -> str | None:
    """The line to log, or ``None`` when UCX would not pay, is chosen, or cannot load.

    Parameters
    ----------
    protocol
        The protocol in use (``None``: distributed's default).
    links
        This host's facts.
    how
        How the user chooses UCX where this is logged (``protocol='ucx'``, ``--protocol ucx``).
    across_nodes
        Whether workers may sit on other nodes (InfiniBand counts only then).

    Examples
    --------
    >>> links = FastLinks(None, nvlink=("0-1 NV18",))
    >>> ucx_hint("tls", links, "protocol='ucx'")  # doctest: +ELLIPSIS
    "UCX would be faster here (NVLink between GPUs 0-1 NV18) and distributed-ucxx is installed: \
choose it with protocol='ucx' ...
    >>> ucx_hint("ucx", links, "protocol='ucx'") is None, ucx_hint("tls", FastLinks("no ucxx"), "x") is None
    (True, True)
    """
    if links.ucx_missing is not None or (protocol or "").lower().split("://")[0] in UCX_SCHEMES:
        return None
    reasons = []
    if links.nvlink:
        reasons.append(f"NVLink between GPUs {', '.join(links.nvlink)}")
    if links.infiniband and across_nodes:
        reasons.append(f"InfiniBand ports {', '.join(links.infiniband)} active")
    if not reasons:
        return None
    return (f"UCX would be faster here ({'; '.join(reasons)}) and distributed-ucxx is installed: "
            f"choose it with {how} (UCX carries no TLS; protocol 'ucx+auth' makes every connection "
            "prove the cluster's key: docs/networking.md)")


@functools.lru_cache(maxsize=1)
def host_links() -> FastLinks:
    """This host's facts, probed once per process (``nvidia-smi topo -m``, sysfs)."""
    from hpcgpu.network.probes import probe_gpu_links, probe_infiniband
    from hpcgpu.network.availability import ucx_unavailable_reason

    missing = ucx_unavailable_reason()
    if missing is not None:  # nothing to advise: skip the probes
        return FastLinks(missing)
    topo = probe_gpu_links()
    return FastLinks(None, nvlink_pairs(topo.get("matrix", "")), active_ports(probe_infiniband()))


def log_ucx_hint(protocol: str | None, how: str, across_nodes: bool = True,
                 say: Callable[[str], None] | None = None) -> str | None:
    """Log :func:`ucx_hint` for this host (with ``say``, else at INFO on ``hpcgpu.network``)."""
    line = ucx_hint(protocol, host_links(), how, across_nodes)
    if line:
        (say or logger.info)(line)
    return line


def local_protocol(protocol: str | None, security) -> str | None:
    """The protocol a local cluster starts with: a UCX one that cannot load here becomes
    the cluster's default (``tls`` with security, else distributed's), with the reason logged;
    otherwise the hint of :func:`log_ucx_hint` where UCX would pay."""
    from hpcgpu.network.availability import INSTALL_HINT, ucx_unavailable_reason

    scheme = (protocol or "").lower().split("://")[0]
    if scheme not in UCX_SCHEMES:
        log_ucx_hint(protocol, "LocalGPUCluster(protocol='ucx')", across_nodes=False)
        return protocol
    reason = ucx_unavailable_reason()
    if reason is None:
        return protocol
    fallback = "tls" if security else None
    logger.warning("protocol=%r cannot start: %s; using %s instead. To use UCX, %s.",
                   protocol, reason, fallback or "tcp", INSTALL_HINT)
    return fallback
