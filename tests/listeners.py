"""Every socket a running cluster listens on, named by role, and docs/security.md's table of
listeners, read back (#38 break 5): the table is checked against running clusters.

``listening(pids)`` reads the sockets (psutil); ``roles(info)`` names the ports the scheduler
reports (``Client.scheduler_info()``); ``account(...)`` says what each socket is and lists
those nobody accounts for; ``table()`` reads the documented listeners; ``connects(...)``
says whether a listener takes a connection at an address.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SECURITY = ROOT / "docs" / "security.md"
LOOPBACK = {"127.0.0.1", "::1"}


#: processes of the batch system and MPI themselves -> whose sockets those are (slurmstepd's
#: leak into the tasks it starts, as an inherited descriptor)
LAUNCHERS = {"srun": "SLURM", "slurmstepd": "SLURM", "mpirun": "MPI", "prterun": "MPI",
             "prted": "MPI", "orted": "MPI", "mpiexec": "MPI"}
#: listeners that are not hpcgpu's or Dask's: the batch system's, MPI's, UCX's own transport
OWNERS = {*LAUNCHERS.values(), "UCX transport"}


def listening(pids) -> list[dict]:
    """The TCP sockets in LISTEN state of ``pids`` and of the SLURM step daemons that
    started them: pid, process name, ip, port."""
    pids = set(pids)
    for pid in list(pids):
        try:
            parent = psutil.Process(pid).parent()
        except psutil.NoSuchProcess:
            continue
        if parent is not None and parent.name() in LAUNCHERS:
            pids.add(parent.pid)
    found = []
    for pid in sorted(pids):
        try:
            process = psutil.Process(pid)
            name, sockets = process.name(), process.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        mpi = bool(sockets) and _has_library(process, "libmpi")
        ucx = bool(sockets) and _has_library(process, "libuct")
        found += [{"pid": pid, "name": name, "ip": s.laddr.ip, "port": s.laddr.port, "mpi": mpi, "ucx": ucx}
                  for s in sockets if s.status == psutil.CONN_LISTEN]
    return found


def connects(address: str, port: int, timeout: float = 1.5) -> bool:
    """Whether a TCP connection to ``address:port`` is set up within ``timeout`` seconds
    (a listener's socket filter, or none there, refuses it)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def _has_library(process: psutil.Process, library: str) -> bool:
    """Whether ``process`` has ``library`` loaded: ``libmpi`` (mpi4py's ranks: Open MPI's
    TCP transport listens in each of them), ``libuct`` (UCX's TCP transport listens on each
    interface it uses, in each process of a UCX cluster)."""
    try:
        return any(library in m.path for m in process.memory_maps())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def with_descendants(pids) -> set[int]:
    """``pids`` and every process below them."""
    out = set()
    for pid in pids:
        try:
            process = psutil.Process(pid)
            out |= {pid, *(c.pid for c in process.children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    return out


def _port(address: str | None) -> tuple[str, int | None]:
    if not address:
        return "", None
    scheme, _, rest = address.rpartition("://")
    if scheme == "unix" or not rest.rpartition(":")[2].isdigit():
        return scheme or "unix", None
    return scheme, int(rest.rpartition(":")[2])


def roles(info: dict) -> dict[str, list[tuple[str, int | None]]]:
    """Role -> (scheme, port) of each listener the scheduler reports (port None: a Unix
    socket). Roles: scheduler, scheduler HTTP, worker, worker HTTP, nanny."""
    out: dict[str, list] = {"scheduler": [_port(info["address"])],
                            "scheduler HTTP": [("http", info.get("services", {}).get("dashboard"))],
                            "worker": [], "worker HTTP": [], "nanny": []}
    for address, worker in info["workers"].items():
        out["worker"].append(_port(address))
        out["nanny"].append(_port(worker.get("nanny")))
        out["worker HTTP"].append(("http", (worker.get("services") or {}).get("dashboard")))
    return out


def account(sockets: list[dict], info: dict, extra_scheduler_ports=()) -> tuple[dict, list]:
    """(role -> set of (scheme, 'loopback'|'network'|'unix'), sockets of no role)."""
    by_port: dict[int, tuple[str, str]] = {}
    seen: dict[str, set] = {}
    for role, listeners in roles(info).items():
        seen[role] = set()
        for scheme, port in listeners:
            if port is None:
                if scheme:
                    seen[role].add((scheme, "unix"))
                continue
            by_port[port] = (role, scheme)
    for port in extra_scheduler_ports:
        by_port.setdefault(port, ("scheduler", "tls"))
    seen.update({owner: set() for owner in OWNERS})
    for sock in sockets:  # a socket SLURM or MPI holds, in its own process or inherited
        if sock.get("name") in LAUNCHERS:
            by_port.setdefault(sock["port"], (LAUNCHERS[sock["name"]], "launcher"))
    stray = []
    for sock in sockets:
        if sock["port"] not in by_port and sock.get("mpi"):  # a Dask role's port wins
            by_port[sock["port"]] = ("MPI", "launcher")
        if sock["port"] not in by_port and sock.get("ucx"):
            by_port[sock["port"]] = ("UCX transport", "launcher")
        if sock["port"] not in by_port:
            stray.append(sock)
            continue
        role, scheme = by_port[sock["port"]]
        seen[role].add((scheme, "loopback" if sock["ip"] in LOOPBACK else "network"))
    return seen, stray


def table(path: Path = SECURITY) -> dict[tuple[str, str], tuple[str, str]]:
    """docs/security.md's listener table: (mode, listener) -> (address word, protection word),
    each the first word of its cell (``loopback``/``network``/``unix``/``any``;
    ``TLS``/``unix``/``ucx+auth``/``open``/``none``)."""
    text = path.read_text()
    section = text.split("\n## Every listener", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("mode", "") or set(cells[0]) <= {"-", " "}:
            continue
        mode, listener, address, protection = (re.sub(r"[`*]", "", c) for c in cells)
        rows[(mode, listener)] = (address.split()[0].rstrip(":,"), protection.split()[0].rstrip(":,"))
    return rows


def check_against_table(mode: str, seen: dict, stray: list) -> None:
    """Assert that what ``mode`` listens on is what the table says, and nothing more."""
    rows = {k[1]: v for k, v in table().items() if k[0] == mode}
    assert rows, f"docs/security.md lists no listener of mode {mode!r}"
    assert not stray, f"{mode}: listeners that no role accounts for: {stray}"
    for role, found in seen.items():
        if role in OWNERS and not found:
            continue  # modes without SLURM, MPI or UCX
        assert role in rows, f"{mode}: {role} listens ({found}) but the table has no row for it"
        address, protection = rows[role]
        assert found, f"{mode}: the table lists {role} but nothing of it listens"
        for scheme, where in found:
            assert address == "any" or where == address, \
                f"{mode}: {role} listens on {where}, the table says {address}"
            if protection == "TLS":
                assert scheme == "tls", f"{mode}: {role} speaks {scheme}, the table says TLS"
            elif protection == "unix":
                assert scheme == "unix", f"{mode}: {role} speaks {scheme}, the table says unix"
            elif protection == "ucx+auth":
                assert scheme == "ucx+auth", f"{mode}: {role} speaks {scheme}, the table says ucx+auth"
            elif protection == "open":  # plain UCX, which the user named: no key, every address
                assert scheme == "ucx", f"{mode}: {role} speaks {scheme}, only plain ucx may be open"
            elif protection == "none":
                assert where == "loopback", f"{mode}: {role} has no protection yet listens on {where}"
    for role in rows:
        assert role in seen and (seen[role] or role in OWNERS), f"{mode}: the table lists {role}, which this check does not know"
