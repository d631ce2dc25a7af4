"""The InfiniBand port behind a network interface, its state, and what UCX gets from it.

On an InfiniBand site ``interface='ib0'`` names the IPoIB interface; UCX moves the data over
the HCA port behind it (``mlx5_0:1``), not over ib0's TCP. This module finds that port (from
sysfs on a live host; ``ibdev2netdev``, ``ibstat`` and ``ibv_devinfo`` outputs parse to the same
values), lists the UCX transports that serve it (``ucx_info -d``) and plans what a worker sets:
``UCX_NET_DEVICES=mlx5_0:1`` for its own host, or a message naming host, port and fix when the
port is not ACTIVE. An interface with no HCA behind it (Ethernet, a veth) gets nothing: UCX
keeps TCP. The parsers are tested on real outputs of public sources (tests/data/infiniband).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["IBPort", "NetdevLink", "IBPlan", "parse_ibstat", "parse_ibv_devinfo", "parse_ibdev2netdev",
           "sysfs_port", "interface_port", "transports_on", "port_problem", "plan", "wants_infiniband"]

_PHYSICAL = {name.lower(): name for name in (
    "Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "PhyTest")}
# UCX_TLS names that reach an HCA (``^tcp`` is "all but tcp"; ``rc_x``/``rc_v`` are rc variants)
_IB_TLS = re.compile(r"(^|,)\s*(\^|all\b|rc|ud|dc|ib\b)")


def _state(text: str) -> str:
    """``Active``, ``PORT_ACTIVE (4)``, ``4: ACTIVE`` -> ``ACTIVE``; ``Initializing`` -> ``INIT``."""
    word = re.sub(r"\(\d+\)|^\d+:|PORT_", "", text.strip()).strip().upper()
    return {"INITIALIZING": "INIT"}.get(word, word)


def _physical(text: str) -> str:
    """``LinkUp``, ``LINK_UP (5)``, ``5: LinkUp`` -> ``LinkUp``."""
    word = re.sub(r"\(\d+\)|^\d+:", "", text.strip()).strip()
    return _PHYSICAL.get(re.sub(r"[\s_]", "", word).lower(), word)


@dataclass(frozen=True)
class IBPort:
    """One port of an HCA (a ``CA`` in ``ibstat``, an ``hca_id`` in ``ibv_devinfo``).

    Attributes
    ----------
    device, port : str, int
        ``mlx5_0`` and ``1``: UCX names it ``mlx5_0:1``.
    state : str
        ``ACTIVE``, ``DOWN``, ``INIT`` (no subnet manager yet) or ``ARMED``.
    physical_state : str or None
        ``LinkUp``, ``Polling`` (no link partner), ``Disabled``...
    link_layer : str or None
        ``InfiniBand``, or ``Ethernet`` for RoCE.
    rate : str or None
        As the tool gave it (``400``, ``400 Gb/sec (4X NDR)``).
    """

    device: str
    port: int
    state: str
    physical_state: str | None = None
    link_layer: str | None = None
    rate: str | None = None

    @property
    def name(self) -> str:
        """The port as UCX names it (``UCX_NET_DEVICES``)."""
        return f"{self.device}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


def _port(fields: dict) -> IBPort:
    return IBPort(fields["device"], int(fields["port"]), _state(fields.get("state", "")),
                  _physical(fields["phys"]) if fields.get("phys") else None,
                  fields.get("link_layer"), fields.get("rate"))


def _parse_blocks(text: str, patterns: dict[str, str]) -> tuple[IBPort, ...]:
    """Ports of a listing where ``device`` and ``port`` lines open blocks of ``key: value`` lines."""
    ports, device, current = [], None, None
    for line in text.splitlines():
        for key, pattern in patterns.items():
            if m := re.match(pattern, line):
                value = m.group(1).strip()
                if key == "device":
                    device, current = value, None
                elif key == "port" and device is not None:
                    current = {"device": device, "port": value}
                    ports.append(current)
                elif current is not None:
                    current.setdefault(key, value)
                break
    return tuple(_port(fields) for fields in ports)


def parse_ibstat(text: str) -> tuple[IBPort, ...]:
    """Every port of ``ibstat``.

    Examples
    --------
    >>> parse_ibstat("CA 'mlx5_0'\\n\\tPort 1:\\n\\t\\tState: Down\\n\\t\\tPhysical state: Polling")
    (IBPort(device='mlx5_0', port=1, state='DOWN', physical_state='Polling', link_layer=None, rate=None),)
    """
    return _parse_blocks(text, {
        "device": r"^\s*CA '([^']+)'", "port": r"^\s*Port (\d+):", "state": r"^\s*State:(.*)",
        "phys": r"^\s*Physical state:(.*)", "rate": r"^\s*Rate:(.*)", "link_layer": r"^\s*Link layer:(.*)"})


def parse_ibv_devinfo(text: str) -> tuple[IBPort, ...]:
    """Every port of ``ibv_devinfo`` (``-v`` adds the physical state).

    Examples
    --------
    >>> parse_ibv_devinfo("hca_id:\\tmlx4_0\\n\\t\\tport:\\t2\\n\\t\\t\\tstate:\\t\\tPORT_DOWN (1)")[0].name
    'mlx4_0:2'
    """
    return _parse_blocks(text, {
        "device": r"^\s*hca_id:(.*)", "port": r"^\s*port:\s*(\d+)\s*$", "state": r"^\s*state:(.*)",
        "phys": r"^\s*phys_state:(.*)", "link_layer": r"^\s*link_layer:(.*)"})


@dataclass(frozen=True)
class NetdevLink:
    """One line of ``ibdev2netdev``: an HCA port and the network interface on it."""

    device: str
    port: int
    netdev: str
    netdev_up: bool
    port_state: str | None = None  # only ``ibdev2netdev -v`` prints it

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"


_IBDEV2NETDEV = re.compile(
    r"^\s*(?:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d\s+)?(?P<device>[\w.-]+)\s.*?"
    r"\bport\s+(?P<port>\d+)(?:\s+\((?P<state>[A-Za-z_]+)\s*\))?\s+==>\s+(?P<netdev>\S+)\s+\((?P<up>\w+)\)")


def parse_ibdev2netdev(text: str) -> tuple[NetdevLink, ...]:
    """The lines of ``ibdev2netdev`` (or ``-v``); others are skipped.

    Examples
    --------
    >>> parse_ibdev2netdev("mlx5_0 port 1 ==> ib0 (Up)")
    (NetdevLink(device='mlx5_0', port=1, netdev='ib0', netdev_up=True, port_state=None),)
    """
    links = []
    for line in text.splitlines():
        if m := _IBDEV2NETDEV.match(line):
            state = _state(m["state"]) if m["state"] else None
            links.append(NetdevLink(m["device"], int(m["port"]), m["netdev"], m["up"].lower() == "up", state))
    return tuple(links)


def sysfs_port(device: str, port: int, files: Mapping[str, str]) -> IBPort:
    """An :class:`IBPort` from the files of ``/sys/class/infiniband/<device>/ports/<port>/``.

    Examples
    --------
    >>> sysfs_port("mlx5_0", 1, {"state": "4: ACTIVE", "phys_state": "5: LinkUp"}).active
    True
    """
    phys = files.get("phys_state")
    return IBPort(device, port, _state(files.get("state", "")), _physical(phys) if phys else None,
                  (files.get("link_layer") or "").strip() or None, (files.get("rate") or "").strip() or None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def interface_port(interface: str, sys_root: str = "/sys") -> IBPort | None:
    """The HCA port behind ``interface`` on this host, from sysfs; ``None`` when there is none
    (an Ethernet NIC, a veth, an interface that does not exist).

    An IPoIB interface's ``device`` is the HCA's PCI function, whose ``infiniband/`` names the
    HCA (openucx/ucx#3463 matches them the same way, ``/sys/class/infiniband/mlx5_0/device/net/ib0``);
    the port is the kernel's ``dev_port`` + 1 (older kernels gave it in ``dev_id``).
    """
    net = Path(sys_root, "class", "net", interface)
    try:
        devices = sorted(p.name for p in (net / "device" / "infiniband").iterdir())
    except OSError:
        return None
    numbers = [int(v, 0) for v in (_read(net / "dev_port"), _read(net / "dev_id")) if v and re.fullmatch(r"(0x)?[0-9a-fA-F]+", v)]
    port = max(numbers, default=0) + 1
    for device in devices:
        ports = Path(sys_root, "class", "infiniband", device, "ports", str(port))
        if ports.is_dir():
            files = {name: _read(ports / name) or "" for name in ("state", "phys_state", "link_layer", "rate")}
            return sysfs_port(device, port, files)
    return None


def transports_on(ucx_transports: Mapping[str, list[str]], port: str) -> tuple[str, ...]:
    """The UCX transports that list ``port`` as a device (``parse_ucx_info(...)["transports"]``).

    Examples
    --------
    >>> transports_on({"tcp": ["ib0"], "rc_mlx5": ["mlx5_0:1"], "dc_mlx5": ["mlx5_0:1"]}, "mlx5_0:1")
    ('dc_mlx5', 'rc_mlx5')
    """
    return tuple(sorted(t for t, devices in ucx_transports.items() if port in devices))


def port_problem(host: str, interface: str, port: IBPort) -> tuple[str, str] | None:
    """``(what, fix)`` when ``port`` cannot carry UCX, else ``None``."""
    if port.active:
        return None
    phys = f", physical state {port.physical_state}" if port.physical_state else ""
    kind = "RoCE" if port.link_layer == "Ethernet" else "InfiniBand"
    what = f"interface {interface!r} on host {host} is {kind} port {port.name}, which is {port.state}{phys}"
    check = f"`ibstat {port.device} {port.port}` on {host} shows it"
    if port.physical_state == "Polling":
        cause = f"no link: check the port's cable and its switch port ({check})"
    elif port.physical_state == "Disabled":
        cause = f"the port is disabled: ask the site's administrators to enable it ({check})"
    elif port.physical_state == "LinkUp":
        cause = "the link is up but no subnet manager has made the port ACTIVE: the fabric's subnet manager (opensm, UFM) must run"
    else:
        cause = f"check the port ({check})"
    fix = (f"{cause}; meanwhile leave host {host} out of the job (SLURM: --exclude={host}) or give "
           f"worker_interface= an interface whose port is ACTIVE")
    return what, fix


@dataclass(frozen=True)
class IBPlan:
    """What a worker on ``host`` does for ``interface``.

    ``net_devices`` is the ``UCX_NET_DEVICES`` to set (``None``: leave UCX as it is);
    ``problem`` is ``(what, fix)`` when the worker must not start; ``note`` says why.
    """

    interface: str
    host: str
    port: IBPort | None
    transports: tuple[str, ...] = ()
    net_devices: str | None = None
    problem: tuple[str, str] | None = None
    note: str = ""


def plan(interface: str, host: str, port: IBPort | None,
         ucx_transports: Mapping[str, list[str]] | None) -> IBPlan:
    """The worker's plan for the port behind its interface, given this UCX's transports.

    Examples
    --------
    >>> plan("ib0", "node1", None, {}).note
    "interface 'ib0' on host node1 has no InfiniBand port behind it: UCX uses TCP over it"
    >>> up = IBPort("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand")
    >>> plan("ib0", "node1", up, {"rc_mlx5": ["mlx5_0:1"], "tcp": ["ib0"]}).net_devices
    'mlx5_0:1'
    """
    if port is None:
        return IBPlan(interface, host, None, note=f"interface {interface!r} on host {host} has no "
                      "InfiniBand port behind it: UCX uses TCP over it")
    if (problem := port_problem(host, interface, port)) is not None:
        return IBPlan(interface, host, port, problem=problem, note=problem[0])
    if ucx_transports is None:
        return IBPlan(interface, host, port, note=f"{port.name} is ACTIVE; no ucx_info here to say which UCX transports use it")
    transports = transports_on(ucx_transports, port.name)
    if not transports:
        return IBPlan(interface, host, port, note=(
            f"{port.name} is ACTIVE but this UCX has no transport on it (built without verbs, as the "
            f"libucx wheels are): UCX uses TCP over {interface}"))
    return IBPlan(interface, host, port, transports, port.name,
                  note=f"interface {interface!r} on host {host} is {port.name} (ACTIVE): UCX_NET_DEVICES="
                       f"{port.name}; UCX transports on it: {', '.join(transports)}")


def wants_infiniband(ucx_tls: str | None, infiniband: bool | None) -> bool:
    """Whether UCX may use an HCA: ``UCX_TLS`` names one (or is unset) and distributed-ucxx's
    ``infiniband`` switch is not off.

    Examples
    --------
    >>> wants_infiniband(None, None), wants_infiniband("tcp", None), wants_infiniband("rc,tcp", None)
    (True, False, True)
    >>> wants_infiniband(None, False)
    False
    """
    if infiniband is False:
        return False
    return ucx_tls is None or bool(_IB_TLS.search(ucx_tls.strip().lower()))
