"""``hpcgpu doctor``: a network and GPU preflight, on the login node and on a compute node.

:func:`diagnose` gathers the facts of this host (:mod:`hpcgpu.network.probes`) and
judges them (:mod:`hpcgpu.doctor.checks`); :func:`hpcgpu.doctor.job.run_doctor_job` does
the same inside a tiny batch job.

Examples
--------
>>> from hpcgpu.network import NetworkSettings
>>> report = diagnose(NetworkSettings.create("tcp"), role="login")
>>> [c["name"] for c in report["checks"]][:3]
['GPUs', 'GPU links', 'InfiniBand']
>>> report["verdict"] in ("ok", "warn", "fail")
True
"""

from __future__ import annotations

import warnings

from hpcgpu.doctor.checks import VERDICTS, Check, evaluate, worst
from hpcgpu.doctor.ibcheck import check_ib_interface, ib_interface_facts
from hpcgpu.network.probes import collect
from hpcgpu.network import NetworkSettings

__all__ = ["diagnose", "Check", "VERDICTS", "ROLES"]

ROLES = ("login", "compute")


def diagnose(settings: NetworkSettings, role: str = "login", scheduler_address: str | None = None,
             ib_root: str = "/sys/class/infiniband", sys_root: str = "/sys") -> dict:
    """Facts and verdicts of this host, as one JSON-ready dict."""
    if role not in ROLES:
        raise ValueError(f"role={role!r}: use 'login' (client/scheduler side) or 'compute' (workers)")
    facts = collect(scheduler_address, ib_root)
    facts["ib_interface"] = ib_interface_facts(settings, role, sys_root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the configuration check reports a fallback itself
        checks = evaluate(facts, settings, role)
    if (ib_check := check_ib_interface(facts, settings)) is not None:
        checks.append(ib_check)
    facts["gpu_links"].pop("matrix", None)
    return {"host": facts["host"], "node": facts["node"], "role": role, "verdict": worst(checks),
            "checks": [c.as_dict() for c in checks], "facts": facts}
