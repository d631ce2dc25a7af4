"""The stand-in that ends a run's process groups when ``hpcgpu run`` is killed.

``python -m hpcgpu.runner.reaper GRACE`` reads lines on its standard input, which only
``hpcgpu run`` holds open (:mod:`hpcgpu.runner.orphans`): ``+PGID`` when a child's process
group starts, ``-PGID`` once it is empty, ``end`` when the run stops in order. End of input
without ``end`` means the run died (``kill -9``, the OOM killer): its children got SIGTERM
from the kernel already (``PR_SET_PDEATHSIG``), but not the processes *they* started, and
nothing stops one that ignores SIGTERM. So the reaper sends SIGTERM to each group left,
SIGKILL to what is left of them ``GRACE`` seconds later, says so, and exits.

Why a process: under SLURM's ``proctrack/linuxproc`` and ``pgid`` (and any batch system
that tracks a job by its process tree) the run's children, each in a session of its own,
are orphans nobody else signals once ``hpcgpu run`` is gone. Stdlib only: it starts fast.
"""

from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["any_running_in_group", "reap", "main"]


def any_running_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is not a zombie (Linux's /proc; elsewhere,
    where there is none, whether the group exists).

    A zombie has exited: only its reaping is pending, which for an orphan is up to init
    (some containers' init does it every second or two).
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
                state, _ppid, pgrp = stat.read().rsplit(b")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            return True
    return False


def _signal_groups(groups: set[int], signum: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def reap(groups: set[int], grace: float) -> set[int]:
    """SIGTERM to every group of ``groups``, SIGKILL to those with a live process after
    ``grace`` s; the groups that needed SIGKILL."""
    _signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = {g for g in groups if any_running_in_group(g)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {g for g in left if any_running_in_group(g)}
    _signal_groups(left, signal.SIGKILL)
    return left


def read_groups(lines) -> tuple[set[int], bool]:
    """The groups still live after ``lines`` of the protocol, and whether ``end`` came.

    Examples
    --------
    >>> read_groups(["+12\\n", "+14\\n", "-12\\n"])
    ({14}, False)
    >>> read_groups(["+12\\n", "end\\n"])
    ({12}, True)
    """
    groups: set[int] = set()
    for line in lines:
        word = line.strip()
        if word == "end":
            return groups, True
        if word[:1] == "+" and word[1:].isdigit():
            groups.add(int(word[1:]))
        elif word[:1] == "-" and word[1:].isdigit():
            groups.discard(int(word[1:]))
    return groups, False


def main(argv: list[str]) -> int:
    """Reap what the run left, if it died; see the module's docstring."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # the job's SIGTERM, a terminal's Ctrl-C, the death signal: the run itself stops then
        signal.signal(signum, signal.SIG_IGN)
    grace = float(argv[0]) if argv else 4.0
    groups, ended = read_groups(sys.stdin)
    if ended or not groups:
        return 0
    killed = reap(groups, grace)
    said = f"SIGTERM to process group(s) {' '.join(map(str, sorted(groups)))}"
    if killed:
        said += f", SIGKILL to {' '.join(map(str, sorted(killed)))} after {grace:g} s"
    print(f"hpcgpu run: hpcgpu run was killed before it stopped its processes: {said}",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
