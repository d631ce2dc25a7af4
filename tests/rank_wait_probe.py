"""A scheduler preload for ``hpcgpu.mpi`` tests: it holds rank 0's scheduler start for
``HOLD`` s and writes what the other ranks of the run (same ``HPCGPU_TEST_MARKER``) spent
of the CPU meanwhile to ``$HPCGPU_TEST_RANK_WAIT``: they wait for the scheduler's address."""

import json
import os
import time

import psutil

HOLD = 1.5


def _other_ranks() -> list[psutil.Process]:
    marker, found = os.environ["HPCGPU_TEST_MARKER"], []
    for process in psutil.process_iter(["environ"]):
        environ = process.info["environ"] or {}
        if environ.get("HPCGPU_TEST_MARKER") == marker and environ.get("OMPI_COMM_WORLD_RANK") not in (None, "0"):
            found.append(process)
    return found


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def dask_setup(scheduler) -> None:
    ranks = _other_ranks()  # this process is rank 0's
    before = {p.pid: _cpu(p) for p in ranks}
    time.sleep(HOLD)
    spent = {p.pid: _cpu(p) - before[p.pid] for p in ranks}
    with open(os.environ["HPCGPU_TEST_RANK_WAIT"], "w") as out:
        json.dump({"hold": HOLD, "cpu": spent}, out)
