"""The faults of real sites, made on the site in a box (scripts/setup-site), and what is left
after them. Plain functions, no pytest: tests/integration/test_site_faults.py and the soak
(benchmarks/site_soak.py) both use them.

Each fault is made inside the site, never on the machine's own network: a switch port set
down (the host's ``ib0`` cable cut), every process of a host killed (its ``slurmd``
included), the site's ``slurmctld`` stopped and started, an ``nft`` rule in a host's own
namespace. Each has its undo, and the undo waits (bounded) until SLURM has the host back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = Path("/run/site")
CONF = SITE / "slurm" / "slurm.conf"
SGE = SITE / "sge"  #: the site's Grid Engine cell (scripts/site-sge), when built
NFT_TABLE = "hpcgpu_fault"
#: the faults: a host's ib0 cut, a host killed, a host dropping what it sends to a port, slurmctld restarted
KINDS = ("link", "kill", "port", "slurmctld")


def wait_until(predicate, timeout: float, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def on_host(host: str, *argv: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """``argv`` run on a site host (scripts/site-exec), its output captured as text."""
    kwargs.setdefault("cwd", ROOT)
    return subprocess.run(["bash", str(ROOT / "scripts" / "site-exec"), host, *argv],
                          capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def compute_hosts() -> list[str]:
    """The site's compute hosts, ``node1`` ... (as many as setup-site built)."""
    count = int((SITE / "compute-hosts").read_text())
    return [f"node{i}" for i in range(1, count + 1)]


def site_jobs(name: str | None = None) -> list[str]:
    """The site's SLURM jobs still listed (``"ID STATE"``; only those named ``name`` if given)."""
    argv = ["squeue", "-h", "-o", "%i %T", *(["-n", name] if name else [])]
    out = on_host("login", *argv, timeout=30).stdout
    return [line for line in out.splitlines() if line.strip()]


def sge_jobs() -> list[str]:
    """The jobs of the site's Grid Engine still listed (``"ID STATE"``; none without the cell)."""
    if not SGE.exists():
        return []
    out = on_host("login", "qstat", "-u", "*", timeout=30).stdout
    return [" ".join(line.split()[0:5:4]) for line in out.splitlines()[2:] if line.strip()]


def host_pids(host: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", f"site-{host}"], capture_output=True, text=True,
                          timeout=30, check=False)
    return [int(pid) for pid in done.stdout.split()]


def command_line(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def leftovers(hosts=("node1", "node2")) -> dict[str, list[str]]:
    """Processes still running on each of ``hosts``, its daemons (slurmd, sge_execd) excepted."""
    found: dict[str, list[str]] = {}
    for host in hosts:
        daemons = {pid_file.read_text().strip() for pid_file in (SITE / "slurm" / f"slurmd-{host}.pid",
                                                                 SGE / "execd" / host / "execd.pid")
                   if pid_file.exists()}
        for pid in host_pids(host):
            if str(pid) not in daemons and (cmd := command_line(pid)) is not None:
                found.setdefault(host, []).append(f"{pid} {cmd[:200]}")
    return found


def node_state(host: str) -> str:
    """SLURM's state of ``host`` (``idle``, ``allocated``, ``down*``...), "" when it does not answer."""
    out = on_host("login", "sinfo", "-h", "-n", host, "-o", "%T", timeout=30).stdout
    return out.split("\n")[0].strip()


# ---------------------------------------------------------------- a host's ib0 cable
def cut_link(host: str) -> None:
    """The switch's end of ``host``'s ``ib0`` down: nothing passes either way."""
    subprocess.run(["ip", "-n", "site-sw", "link", "set", f"f-{host}", "down"], check=True, timeout=30)


def restore_link(host: str) -> None:
    subprocess.run(["ip", "-n", "site-sw", "link", "set", f"f-{host}", "up"], check=True, timeout=30)


def set_ib0_inside(host: str, state: str) -> None:
    """``ip link set ib0 down`` (or ``up``) inside ``host``, as an administrator or a failing
    driver does: its routes over ib0 go with it."""
    subprocess.run(["ip", "-n", f"site-{host}", "link", "set", "ib0", state], check=True, timeout=30)


# ---------------------------------------------------------------- a host killed
def kill_host(host: str) -> int:
    """Every process of ``host`` killed (its slurmd, job steps, workers): how many.

    All are stopped first, then killed: a host that dies tells nobody, while processes
    killed one by one would (a job step whose script died first reports the job's end to
    slurmctld, which then ends the job instead of finding its node dead and requeuing it).
    """
    stopped: set[int] = set()
    for _ in range(5):  # a process forked meanwhile is stopped on the next round
        pids = set(host_pids(host)) - stopped
        if not pids:
            break
        _signal(pids, signal.SIGSTOP)
        stopped |= pids
    _signal(stopped, signal.SIGKILL)
    return len(stopped)


def _signal(pids, signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def revive_host(host: str, timeout: float = 60) -> str:
    """``host``'s daemons started again where they are not running (slurmd; sge_execd where the
    site has a Grid Engine cell), as its boot would, and the node usable (resumed where SLURM
    marked it down): its SLURM state then."""
    if not alive_slurmd(host):
        done = on_host(host, "slurmd", "-f", str(CONF), timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"slurmd on {host} did not start: {done.stderr.strip()}")
    if (SGE / "execd" / host).exists() and not _alive(SGE / "execd" / host / "execd.pid"):
        done = on_host(host, "sge_execd", timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"sge_execd on {host} did not start: {done.stderr.strip()}")

    def usable() -> str | None:
        state = node_state(host)
        if state.startswith(("down", "drain", "fail")) and not state.endswith("*"):
            # slurmd answers but SLURM keeps the node down: resume it, as an admin would
            on_host("login", "scontrol", "update", f"nodename={host}", "state=resume", timeout=30)
        return state if state.rstrip("*~#") in ("idle", "mixed", "allocated", "completing") \
            and not state.endswith("*") else None

    return wait_until(usable, timeout, 0.5, what=f"{host} back in SLURM")


# ---------------------------------------------------------------- slurmctld restarted
def stop_slurmctld(timeout: float = 30) -> None:
    pid = int((SITE / "slurm" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not _running(pid), timeout, 0.2, what="slurmctld to stop")


def start_slurmctld(timeout: float = 30) -> None:
    done = on_host("login", "slurmctld", "-f", str(CONF), timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"slurmctld did not start: {done.stderr.strip()}")
    wait_until(lambda: on_host("login", "sinfo", "-h", timeout=30).returncode == 0, timeout, 0.2,
               what="slurmctld to answer")


def alive_slurmctld() -> bool:
    return _alive(SITE / "slurm" / "slurmctld.pid")


def alive_slurmd(host: str) -> bool:
    return _alive(SITE / "slurm" / f"slurmd-{host}.pid")


def _alive(pid_file: Path) -> bool:
    try:
        return _running(int(pid_file.read_text()))
    except (OSError, ValueError):
        return False


def _running(pid: int) -> bool:
    """Process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def restart_slurmctld() -> None:
    stop_slurmctld()
    start_slurmctld()


# ---------------------------------------------------------------- a firewall rule
def drop_port(host: str, port: int | str, hook: str = "input") -> None:
    """An nft rule in ``host``'s namespace dropping TCP packets to ``port`` (a number or
    ``A-B``) on ``hook`` (``input``: arriving, ``output``: leaving), loopback excepted."""
    iface = "iifname" if hook == "input" else "oifname"
    rule = (f"add table inet {NFT_TABLE}; add chain inet {NFT_TABLE} {hook} "
            f"{{ type filter hook {hook} priority 0; }}; "
            f"add rule inet {NFT_TABLE} {hook} {iface} != \"lo\" tcp dport {port} drop")
    done = on_host(host, "nft", rule, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"nft on {host}: {done.stderr.strip()}")


def undrop(host: str) -> None:
    """Remove the rules of :func:`drop_port` from ``host`` (none there: nothing to do)."""
    if on_host(host, "nft", "list", "table", "inet", NFT_TABLE, timeout=30).returncode == 0:
        done = on_host(host, "nft", "delete", "table", "inet", NFT_TABLE, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"nft on {host}: {done.stderr.strip()}")


# ---------------------------------------------------------------- any of them, held and undone
def hold_fault(kind: str, host: str, hold: float, stop: threading.Event, port: int = 0) -> dict:
    """Make one fault of ``kind`` (:data:`KINDS`) on ``host``, hold it ``hold`` s (less once
    ``stop`` is set), undo it: its record (what was done, how long, what SLURM showed)."""
    started = time.monotonic()
    record: dict = {"kind": kind, "host": host}
    try:
        if kind == "link":
            cut_link(host)
        elif kind == "kill":
            record["processes_killed"] = kill_host(host)
        elif kind == "port":
            drop_port(host, port, hook="output")
            record["port"] = port
        else:
            stop_slurmctld()
        states = set()
        while not stop.wait(min(2.0, max(0.0, hold - (time.monotonic() - started)))):
            if kind == "kill":
                states.add(node_state(host))
            if time.monotonic() - started >= hold:
                break
        if states:
            record["slurm_states_while_down"] = sorted(states)
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
    finally:
        record["held_s"] = round(time.monotonic() - started, 1)
        undo = time.monotonic()
        record.update(undo_fault(kind, host))
        record["undo_s"] = round(time.monotonic() - undo, 1)
    return record


def undo_fault(kind: str, host: str) -> dict:
    """Undo ``kind`` on ``host``; ``{"undo_error": ...}`` if it could not be (already undone: fine)."""
    try:
        if kind == "link":
            restore_link(host)
        elif kind == "kill":
            return {"state_after": revive_host(host, timeout=90)}
        elif kind == "port":
            undrop(host)
        elif not alive_slurmctld():
            start_slurmctld()
    except Exception as error:
        return {"undo_error": f"{type(error).__name__}: {error}"}
    return {}
