"""Verdicts from facts: pure functions, one per topic, each with the fix where needed.

``role`` is ``login`` (where the client and, in cluster mode, the scheduler run) or
``compute`` (where the GPU workers run): a login node without GPUs is fine, a compute
node without them is not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hpcgpu.network import INSTALL_HINT, NetworkSettings, job_environment, resolve

__all__ = ["VERDICTS", "Check", "evaluate", "worst"]

VERDICTS = ("ok", "warn", "fail")
_NVLINK_HINT = "transports='auto' (or 'nvlink') with protocol='ucx' moves GPU data over NVLink"


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    verdict: str
    summary: str
    fix: str | None = None

    def as_dict(self) -> dict:
        """Plain dict, for ``--json``."""
        return asdict(self)


def worst(checks: list[Check]) -> str:
    """The worst verdict.

    Examples
    --------
    >>> worst([Check("a", "ok", ""), Check("b", "warn", "")])
    'warn'
    """
    return max((c.verdict for c in checks), key=VERDICTS.index, default="ok")


def check_gpus(facts: dict, role: str) -> Check:
    gpus = facts["gpus"]["gpus"]
    if gpus:
        names = sorted({g["name"] for g in gpus})
        return Check("GPUs", "ok", f"{len(gpus)} x {', '.join(names)}"
                     + (f" (driver {facts['gpus']['driver']})" if facts["gpus"].get("driver") else ""))
    why = facts["gpus"].get("nvml_error") or facts["gpus"].get("nvidia_smi_error") or "none listed"
    visible = facts["gpus"].get("cuda_visible_devices")
    if role == "login":
        return Check("GPUs", "ok", f"none on this login node ({why}); GPU workers run on compute nodes")
    return Check("GPUs", "fail", f"no GPU visible (CUDA_VISIBLE_DEVICES={visible}; {why})",
                 "ask the scheduler for GPUs (gpus_per_node >= 1, the site's GPU partition) and "
                 "check that the NVIDIA driver (nvidia-smi) works on the compute node")


def check_gpu_links(facts: dict, settings: NetworkSettings) -> Check:
    links = facts["gpu_links"]["links"]
    n = len(facts["gpus"]["gpus"])
    if n < 2:
        return Check("GPU links", "ok", f"{n} GPU(s) here: no GPU-to-GPU links to use")
    if not links:
        return Check("GPU links", "warn", "nvidia-smi topo -m gave no matrix",
                     "run nvidia-smi topo -m on the node to see NVLink/PCIe")
    missing = [f"GPU{i}-GPU{j}" for i in range(n) for j in range(i + 1, n) if f"{i}-{j}" not in links]
    if missing or any(kind == "X" for kind in links.values()):
        return Check("GPU links", "warn", f"could not read nvidia-smi topo -m (no link for {', '.join(missing) or 'some pairs'})",
                     "run nvidia-smi topo -m on the node and report its output to hpcgpu")
    slow = {pair: kind for pair, kind in links.items() if not kind.startswith("NV")}
    kinds = ", ".join(sorted(set(links.values())))
    if not slow:
        use = "" if settings.is_ucx else f"; protocol={settings.protocol!r} does not use it: {_NVLINK_HINT}"
        return Check("GPU links", "ok" if settings.is_ucx else "warn",
                     f"NVLink between all {n} GPUs ({kinds}){use}",
                     None if settings.is_ucx else "pass protocol='ucx'")
    pairs = ", ".join(f"GPU{p.replace('-', '-GPU')}: {k}" for p, k in sorted(slow.items()))
    return Check("GPU links", "warn", f"PCIe/host paths between some GPUs ({pairs})",
                 "those pairs are slower; UCX still uses cuda_ipc over PCIe where peer access works")


def check_infiniband(facts: dict, settings: NetworkSettings, role: str) -> Check:
    devices = facts["infiniband"]["devices"]
    wants_ib = "infiniband" in (settings.transports or ())
    active = [f"{d['device']}:{p['port']} ({p['rate']}, {p['link_layer']})" for d in devices
              for p in d["ports"] if (p["state"] or "").endswith("ACTIVE")]
    if not devices:
        if wants_ib:
            return Check("InfiniBand", "fail", f"transports include infiniband but {facts['infiniband']['root']} is empty",
                         "drop 'infiniband' from transports, or run where the IB driver is loaded")
        if role == "login":
            return Check("InfiniBand", "ok", "none on this node (only needed where workers talk to each other)")
        return Check("InfiniBand", "warn", "no InfiniBand/RoCE device: workers on different nodes talk over TCP",
                     "fine on one node; across nodes ask the site for nodes with InfiniBand")
    if not active:
        return Check("InfiniBand", "fail" if wants_ib else "warn",
                     f"{len(devices)} device(s), no port ACTIVE", "check the cable/subnet manager (ibstat)")
    ucx = facts["ucx"]
    if ucx.get("version") and not ucx.get("verbs"):
        return Check("InfiniBand", "fail" if wants_ib else "warn",
                     f"active: {', '.join(active)}; but this UCX ({ucx['ucx_info']}) was built --without-verbs",
                     "the libucx wheel has no InfiniBand: load a UCX built with verbs (site module or "
                     "MOFED's ucx) and set RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true")
    return Check("InfiniBand", "ok", f"active: {', '.join(active)}")


def check_ucx(facts: dict, settings: NetworkSettings, role: str = "compute") -> Check:
    ucx = facts["ucx"]
    if ucx["unavailable"]:
        if not settings.is_ucx:
            return Check("UCX", "ok", f"not used (protocol={settings.protocol!r}); {ucx['unavailable']}")
        if role == "login" and settings.client_protocol:
            return Check("UCX", "ok", f"not needed here: the client reaches the scheduler over "
                         f"{settings.client_protocol} ({ucx['unavailable']})")
        verdict = "warn" if settings.fallback else "fail"
        fix = INSTALL_HINT + ("" if settings.fallback else "; or fallback='tcp'")
        return Check("UCX", verdict, f"protocol={settings.protocol!r} but {ucx['unavailable']}"
                     + (f": hpcgpu falls back to {settings.fallback!r}" if settings.fallback else ""), fix)
    transports = ", ".join(sorted(ucx.get("transports") or {})) or "unknown (no ucx_info)"
    summary = f"UCX {ucx.get('version') or '?'}, distributed-ucxx {ucx['distributed_ucxx']}; transports: {transports}"
    have = set(ucx.get("transports") or {})
    if "nvlink" in (settings.transports or ()) and have and "cuda_ipc" not in have and facts["gpus"]["gpus"]:
        return Check("UCX", "fail", summary + "; no cuda_ipc for nvlink",
                     "use a CUDA-enabled UCX (the libucx-cu12/cu13 wheel) or drop 'nvlink'")
    if not settings.is_ucx:
        return Check("UCX", "ok", summary + f"; not used (protocol={settings.protocol!r})")
    return Check("UCX", "ok", summary)


def check_mpi(facts: dict) -> Check:
    mpi = facts["mpi"]
    if mpi["mpirun"] is None and mpi["mpi4py"] is None:
        return Check("MPI", "warn", "no mpirun and no mpi4py",
                     "only needed for launcher='mpirun' and MPI batch mode: load the site's MPI module")
    parts = [mpi["mpirun"] or "no mpirun", f"mpi4py {mpi['mpi4py']}" if mpi["mpi4py"] else "no mpi4py"]
    return Check("MPI", "ok" if mpi["mpirun"] and mpi["mpi4py"] else "warn", "; ".join(parts),
                 None if mpi["mpirun"] and mpi["mpi4py"] else "pip install 'hpcgpu[mpi]' / load the MPI module")


def check_interface(facts: dict, settings: NetworkSettings, role: str) -> Check:
    wanted = settings.scheduler_interface if role == "login" else settings.worker_interface
    which = "scheduler_interface" if role == "login" else "worker_interface"
    interfaces = facts["interfaces"]
    listing = ", ".join(f"{n} {'/'.join(i['ipv4']) or '-'}" for n, i in sorted(interfaces.items()) if i["up"])
    if wanted is None:
        return Check("Interface", "ok", f"{which}: the host's default address; up: {listing}")
    if wanted not in interfaces:
        return Check("Interface", "fail", f"{which}={wanted!r} does not exist here; up: {listing}",
                     f"pick one of {', '.join(sorted(interfaces))} for {which}")
    info = interfaces[wanted]
    if not info["up"] or not (info["ipv4"] or info["ipv6"]):
        return Check("Interface", "fail", f"{which}={wanted!r} is down or has no address",
                     f"pick an interface that is up, e.g. one of: {listing}")
    return Check("Interface", "ok", f"{which}={wanted!r} -> {', '.join(info['ipv4'] + info['ipv6'])}")


def check_scheduler(facts: dict) -> Check | None:
    sched = facts["scheduler"]
    if not sched.get("address"):
        return None
    via = sched.get("via") or {}
    reach = sorted(name for name, result in via.items() if result == "ok")
    routes = "; ".join(f"via {name}: {result}" for name, result in sorted(via.items()))
    if sched["reachable"]:
        return Check("Scheduler reachable", "ok",
                     f"{sched['address']} in {sched['ms']} ms" + (f"; reached via {', '.join(reach)}" if reach else ""))
    networks = ", ".join(f"{name} {' '.join(info['ipv4'])}" for name, info in sorted(facts["interfaces"].items())
                         if name != "lo" and info["ipv4"])
    fix = ("the workers cannot reach the scheduler: give scheduler_interface an interface the "
           "compute nodes can route to (often ib0 or the cluster network, not the login node's "
           "public one), check firewalls, or run the scheduler inside the job")
    if via and not reach:
        fix = (f"no interface of this host reaches it ({routes}): start the scheduler on one of "
               f"this host's networks ({networks}), e.g. interface='ib0' or scheduler_interface= "
               "naming the login host's interface on that network; or run the scheduler inside the job")
    return Check("Scheduler reachable", "fail", f"{sched['address']}: {sched['error']}" +
                 (f"; {routes}" if routes else ""), fix)


def check_configuration(settings: NetworkSettings, role: str) -> Check:
    if role == "login" and settings.client_protocol:
        settings = NetworkSettings.create(settings.client_protocol, interface=settings.scheduler_interface)
    try:
        used = resolve(settings)
    except ImportError as exc:
        return Check("Configuration", "fail", str(exc).split(":")[0], INSTALL_HINT)
    env = " ".join(f"{k}={v}" for k, v in job_environment(used, "worker")) or "(none)"
    transports = "auto" if used.auto else ",".join(used.transports or ())
    return Check("Configuration", "ok",
                 f"protocol={used.protocol} transports={transports} scheduler_interface="
                 f"{used.scheduler_interface} worker_interface={used.worker_interface}; worker env: {env}")


def evaluate(facts: dict, settings: NetworkSettings, role: str) -> list[Check]:
    """All checks for one host."""
    checks = [
        check_gpus(facts, role), check_gpu_links(facts, settings),
        check_infiniband(facts, settings, role), check_ucx(facts, settings, role), check_mpi(facts),
        check_interface(facts, settings, role), check_scheduler(facts),
        check_configuration(settings, role),
    ]
    return [c for c in checks if c is not None]
