"""A user's script for the batch-mode log tests: it leaves its client open, as scripts do,
records where its cluster's dashboard listens, and fails with ``--fail``.

    hpcgpu run batch_user_script.py OUT.json [--fail]
    mpirun -n 2 python -m hpcgpu.mpi batch_user_script.py OUT.json [--fail]
    srun -n 2 python batch_user_script.py OUT.json --runner [--fail] [--hold]
"""

from __future__ import annotations

import json
import sys
import time

import psutil

import hpcgpu


def listening_on(port: int) -> list[str]:
    """The addresses at which this run's processes (this one's parent and every process
    under it: the launcher, the scheduler, the ranks) listen on ``port``. Not every socket of
    the machine: another test's process may listen on the same port at another address
    (CI saw 192.0.2.2, this host's network address, beside the dashboard's 127.0.0.1)."""
    parent = psutil.Process().parent()
    run = {parent.pid, *(p.pid for p in parent.children(recursive=True))}
    return sorted({c.laddr.ip for c in psutil.net_connections("inet")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid in run})


def use(client, path: str, fail: bool) -> None:
    assert client.submit(sum, [1, 2], resources={"GPU": 1}).result() == 3
    port = client.scheduler_info()["services"].get("dashboard")
    with open(path, "w") as handle:
        json.dump({"port": port, "listening": listening_on(port) if port else []}, handle)
    if fail:
        raise RuntimeError("the user's own error")
    if "--hold" in sys.argv:  # until a signal comes
        open(path + ".started", "w").close()
        time.sleep(300)


if __name__ == "__main__":
    out, fail = sys.argv[1], "--fail" in sys.argv
    if "--runner" in sys.argv:
        with hpcgpu.GPURunner(scheduler_file=out + ".scheduler-{job_id}.json") as runner:
            use(runner.get_client(), out, fail)
    else:
        use(hpcgpu.get_client(), out, fail)
