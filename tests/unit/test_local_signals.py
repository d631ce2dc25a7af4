"""LocalGPUCluster's threads block the stop signals, its worker processes do not (#39 item 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

STOP_BITS = sum(1 << (s - 1) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))

#: A LocalGPUCluster that has computed: the blocked stop signals of each of this process's
#: threads, and of each worker process's main thread (as JSON).
SCRIPT = f"""
import json, os
from hpcgpu import LocalGPUCluster
from distributed import Client

def blocked(pid, tid):
    status = open(f"/proc/{{pid}}/task/{{tid}}/status").read()
    line = next(l for l in status.splitlines() if l.startswith("SigBlk"))
    return int(line.split()[1], 16) & {STOP_BITS}

if __name__ == "__main__":
    with LocalGPUCluster(n_workers=2, gpus=[]) as cluster, Client(cluster) as client:
        assert client.submit(sum, [1, 2]).result() == 3
        me = os.getpid()
        workers = list(client.run(os.getpid).values())  # spawned or forked from the fork server
        print(json.dumps({{"main": blocked(me, me),
                          "threads": [blocked(me, t) for t in os.listdir(f"/proc/{{me}}/task") if int(t) != me],
                          "workers": [blocked(w, w) for w in workers]}}), flush=True)
"""


def test_threads_block_them_worker_processes_take_them(tmp_path):
    script = tmp_path / "local.py"  # a file: the workers' processes import the main module
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["main"] == 0
    assert len(seen["threads"]) >= 3 and set(seen["threads"]) == {STOP_BITS}, seen
    assert len(seen["workers"]) == 2 and set(seen["workers"]) == {0}, seen
