"""Facts about this host that hpcgpu's communication depends on.

Each probe returns plain data (JSON-ready) and never raises for a missing tool or
library: "not there" is a fact too. Verdicts are made from these facts elsewhere
(:mod:`hpcgpu.doctor.checks`), so they can be tested with any facts.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from hpcgpu.system import spawn

__all__ = ["collect", "parse_gpu_list", "parse_topo", "parse_ucx_info", "probe_gpu_links", "probe_gpus",
           "probe_infiniband", "probe_interfaces", "probe_mpi", "probe_reachable", "probe_routes", "probe_ucx"]


def _run(argv: list[str], timeout: float = 20, env: dict | None = None) -> tuple[int, str]:
    try:
        done = spawn.run(argv, timeout=timeout, env=env)
    except (FileNotFoundError, PermissionError) as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {timeout} s"
    return done.returncode, done.stdout + done.stderr


def probe_gpus() -> dict:
    """GPUs this process sees, from NVML, else ``nvidia-smi -L``."""
    facts: dict = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpus": []}
    try:
        import pynvml

        pynvml.nvmlInit()
        facts["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            facts["gpus"].append({"index": i, "name": _text(pynvml.nvmlDeviceGetName(handle)),
                                  "memory": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)})
        facts["source"] = "nvml"
        return facts
    except Exception as exc:  # no library, no driver or no GPU
        facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
    code, out = _run(["nvidia-smi", "-L"])
    if code == 0:
        facts["gpus"] = parse_gpu_list(out)
        facts["source"] = "nvidia-smi"
    else:
        facts["source"] = None
        facts["nvidia_smi_error"] = out.strip()[:300]
    return facts


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_gpu_list(text: str) -> list[dict]:
    """Index and name of each GPU from ``nvidia-smi -L``.

    Examples
    --------
    >>> parse_gpu_list("GPU 0: NVIDIA H200 (UUID: GPU-53ed)\\nGPU 1: NVIDIA H200 (UUID: GPU-8be7)")
    [{'index': 0, 'name': 'NVIDIA H200'}, {'index': 1, 'name': 'NVIDIA H200'}]
    """
    gpus = []
    for line in text.splitlines():
        if m := re.match(r"GPU (\d+): (.*?)\s*(\(UUID|$)", line):
            gpus.append({"index": int(m.group(1)), "name": m.group(2)})
    return gpus


# nvidia-smi underlines the matrix header with ANSI escapes (ESC[4m ... ESC[0m), even into a pipe.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def parse_topo(text: str) -> dict[str, str]:
    """Link type of each GPU pair from ``nvidia-smi topo -m``.

    Examples
    --------
    >>> topo = '''\\tGPU0\\tGPU1\\tGPU2\\tCPU Affinity
    ... GPU0\\t X \\tNV18\\tSYS\\t0-31
    ... GPU1\\tNV18\\t X \\tPHB\\t0-31
    ... GPU2\\tSYS\\tPHB\\t X \\t32-63'''
    >>> parse_topo(topo)
    {'0-1': 'NV18', '0-2': 'SYS', '1-2': 'PHB'}
    """
    lines = [line for line in _ANSI_ESCAPE.sub("", text).splitlines() if line.strip()]
    if not lines:
        return {}
    header = lines[0].split()
    gpus = [h for h in header if re.fullmatch(r"GPU\d+", h)]
    links: dict[str, str] = {}
    for line in lines[1:]:
        cells = line.split()
        if not cells or cells[0] not in gpus:
            continue
        i = int(cells[0][3:])
        for col, value in zip(gpus, cells[1:1 + len(gpus)]):
            j = int(col[3:])
            if i < j:
                links[f"{i}-{j}"] = value
    return links


def probe_gpu_links() -> dict:
    """How the GPUs are linked (NVLink ``NV#``, PCIe ``PIX``/``PXB``/``PHB``, ``NODE``, ``SYS``)."""
    code, out = _run(["nvidia-smi", "topo", "-m"])
    if code != 0:
        return {"links": {}, "error": out.strip()[:300]}
    return {"links": parse_topo(out), "matrix": out}


def probe_infiniband(root: str = "/sys/class/infiniband") -> dict:
    """InfiniBand/RoCE devices and their ports' state, rate and link layer."""
    base = Path(root)
    devices = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        ports = []
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            read = lambda name: (port / name).read_text().strip() if (port / name).exists() else None
            ports.append({"port": port.name, "state": read("state"), "rate": read("rate"),
                          "link_layer": read("link_layer")})
        devices.append({"device": dev.name, "ports": ports})
    return {"root": root, "devices": devices}


def _ucx_info_argv() -> tuple[list[str], dict | None] | None:
    """``ucx_info`` of the UCX that ucxx will load: the libucx wheel's unless the system's is preferred."""
    prefer_system = os.environ.get("RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY", "false").lower() != "false"
    try:
        libucx = Path(importlib.import_module("libucx").__file__).parent
    except Exception:
        libucx = None
    if libucx and (libucx / "bin" / "ucx_info").exists() and not (prefer_system and shutil.which("ucx_info")):
        env = dict(os.environ, LD_LIBRARY_PATH=f"{libucx / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}")
        return [str(libucx / "bin" / "ucx_info")], env
    found = shutil.which("ucx_info")
    return ([found], None) if found else None


def parse_ucx_info(version_text: str, devices_text: str) -> dict:
    """Version, build options and transports (with their devices) from ``ucx_info -v``/``-d``.

    Examples
    --------
    >>> v = "# Library version: 1.21.0\\n# Configured with: --enable-mt --without-verbs --with-cuda=/x"
    >>> d = "#      Transport: tcp\\n#         Device: lo\\n#      Transport: cuda_ipc\\n#         Device: cuda"
    >>> info = parse_ucx_info(v, d)
    >>> info["version"], info["verbs"], info["transports"]
    ('1.21.0', False, {'tcp': ['lo'], 'cuda_ipc': ['cuda']})
    """
    version = re.search(r"Library version:\s*(\S+)", version_text) or re.search(r"Version\s+(\S+)", version_text)
    configured = re.search(r"Configured with:\s*(.*)", version_text)
    transports: dict[str, list[str]] = {}
    current = None
    for line in devices_text.splitlines():
        if m := re.search(r"Transport:\s*(\S+)", line):
            current = m.group(1)
            transports.setdefault(current, [])
        elif (m := re.search(r"Device:\s*(\S+)", line)) and current:
            transports[current].append(m.group(1))
    options = configured.group(1) if configured else ""
    return {"version": version.group(1) if version else None, "configured": options,
            "verbs": "--without-verbs" not in options, "rdmacm": "--without-rdmacm" not in options,
            "transports": transports}


def probe_ucx() -> dict:
    """distributed-ucxx, ucxx and UCX itself: versions, build and transports."""
    from hpcgpu.network.availability import ucx_unavailable_reason

    facts: dict = {"unavailable": ucx_unavailable_reason()}
    for module in ("distributed_ucxx", "ucxx"):
        try:
            facts[module] = importlib.import_module(module).__version__
        except Exception:
            facts[module] = None
    found = _ucx_info_argv()
    if found is None:
        facts["ucx_info"] = None
        return facts
    argv, env = found
    _, version = _run(argv + ["-v"], env=env)
    code, devices = _run(argv + ["-d"], env=env, timeout=60)
    facts["ucx_info"] = argv[0]
    facts.update(parse_ucx_info(version, devices if code == 0 else ""))
    return facts


def probe_mpi() -> dict:
    """``mpirun --version`` and mpi4py (without initialising MPI)."""
    code, out = _run(["mpirun", "--version"])
    facts: dict = {"mpirun": out.strip().splitlines()[0] if code == 0 and out.strip() else None}
    try:
        facts["mpi4py"] = importlib.import_module("mpi4py").__version__
    except Exception:
        facts["mpi4py"] = None
    return facts


def probe_interfaces() -> dict:
    """Network interfaces with their IPv4/IPv6 addresses and whether they are up."""
    import psutil

    stats = psutil.net_if_stats()
    out = {}
    for name, addrs in psutil.net_if_addrs().items():
        out[name] = {
            "ipv4": [a.address for a in addrs if a.family == socket.AF_INET],
            "ipv6": [a.address.split("%")[0] for a in addrs if a.family == socket.AF_INET6],
            "up": bool(stats[name].isup) if name in stats else None,
            "speed_mbps": stats[name].speed if name in stats else None,
        }
    return out


def probe_reachable(address: str | None, timeout: float = 5.0) -> dict:
    """Whether a TCP connection to the scheduler's host:port opens from here.

    UCX listeners accept their connections over TCP sockets too, so this holds for
    ``ucx://`` addresses as well.
    """
    if not address:
        return {"address": None}
    from distributed.comm.addressing import get_address_host_port

    try:
        host, port = get_address_host_port(address)
    except Exception as exc:
        return {"address": address, "reachable": False, "error": f"not an address: {exc}"}
    start = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        return {"address": address, "reachable": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"address": address, "reachable": True, "ms": round(1000 * (time.perf_counter() - start), 2)}


def probe_routes(address: str | None) -> dict[str, str]:
    """Interface -> ``"ok"`` when the scheduler's host is on that interface's network or this
    host's routing table sends it there (``ip route get``), else what it is instead.

    A connection forced onto one interface (``SO_BINDTODEVICE``) says little: a host answers
    for all its addresses on every link, so the route is what workers will really use.
    """
    import ipaddress

    import psutil
    from distributed.comm.addressing import get_address_host_port

    if not address:
        return {}
    try:
        target = ipaddress.ip_address(socket.gethostbyname(get_address_host_port(address)[0]))
    except (OSError, ValueError):  # not an address, or a name that does not resolve here
        return {}
    code, text = _run(["ip", "-o", "route", "get", str(target)], timeout=5)
    routed = text.split(" dev ", 1)[1].split()[0] if code == 0 and " dev " in text else None
    out = {}
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if name == "lo" or a.family != socket.AF_INET or not a.netmask:
                continue
            network = ipaddress.ip_interface(f"{a.address}/{a.netmask}").network
            out[name] = "ok" if target in network or routed == name else f"not on its network {network}"
    return out


def collect(scheduler_address: str | None = None, ib_root: str = "/sys/class/infiniband") -> dict:
    """All facts of this host."""
    return {
        "host": socket.gethostname(),
        "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "gpus": probe_gpus(),
        "gpu_links": probe_gpu_links(),
        "infiniband": probe_infiniband(ib_root),
        "ucx": probe_ucx(),
        "mpi": probe_mpi(),
        "interfaces": probe_interfaces(),
        "scheduler": {**probe_reachable(scheduler_address), "via": probe_routes(scheduler_address)},
    }
