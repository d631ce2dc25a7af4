"""The doctor's verdict on the InfiniBand port behind the role's interface.

Facts: ``facts["ib_interface"]`` (:func:`ib_interface_facts`: the interface, its HCA port from
sysfs) and ``facts["ucx"]["transports"]`` (``ucx_info -d``). The verdict is
:func:`hpcgpu.network.ib.plan`'s, the same one a worker acts on at start-up.
"""

from __future__ import annotations

from dataclasses import asdict

from hpcgpu.doctor.checks import Check
from hpcgpu.network import NetworkSettings
from hpcgpu.network.ib import IBPort, interface_port, plan

__all__ = ["ib_interface_facts", "check_ib_interface"]


def _role_interface(settings: NetworkSettings, role: str) -> str | None:
    return settings.scheduler_interface if role == "login" else settings.worker_interface


def ib_interface_facts(settings: NetworkSettings, role: str, sys_root: str = "/sys") -> dict:
    """The role's interface and the HCA port behind it (``None``: none)."""
    interface = _role_interface(settings, role)
    port = interface_port(interface, sys_root) if interface else None
    return {"interface": interface, "port": asdict(port) if port else None}


def check_ib_interface(facts: dict, settings: NetworkSettings) -> Check | None:
    """``None`` when the role's interface has no HCA behind it (nothing to say)."""
    ib = facts.get("ib_interface") or {}
    if not ib.get("port"):
        return None
    port = IBPort(**ib["port"])
    transports = facts["ucx"].get("transports") if facts["ucx"].get("ucx_info") else None
    chosen = plan(ib["interface"], facts["host"], port, transports)
    if chosen.problem:
        return Check("InfiniBand port", "fail", chosen.problem[0], chosen.problem[1])
    if not settings.is_ucx:
        return Check("InfiniBand port", "ok", f"{ib['interface']} is {port.name} (ACTIVE, {port.link_layer}, "
                     f"{port.rate}); protocol={settings.protocol!r} uses TCP over it")
    if transports is not None and not chosen.net_devices:
        return Check("InfiniBand port", "warn", chosen.note,
                     "load a UCX built with verbs (site module, MOFED's) and set "
                     "RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true")
    return Check("InfiniBand port", "ok", chosen.note)
