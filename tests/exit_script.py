"""Run by tests/integration/test_reliability_exit.py: a user's script that ends abruptly.

``python exit_script.py MODE LOG_DIRECTORY``: two SLURM clusters, one whose job runs (its
worker connects) and one whose job stays pending (``--begin=now+1hour``). It prints
``JOBS <id> <id>`` and ``READY``, then ends by MODE: ``noclose`` (falls off its end),
``timeout`` (an uncaught ``TimeoutError`` from ``wait_for_workers``), ``close``
(``cluster.close()``), ``wait`` (sleeps: the test sends SIGTERM or SIGKILL).
"""

import sys
import time


def main(mode: str, logs: str) -> None:
    from hpcgpu import SLURMCluster

    fast = dict(walltime="00:10:00", death_timeout=20, poll_interval=0.5, gpus_per_node=1,
                log_directory=logs, scheduler_options={"dashboard_address": "localhost:0"})
    running = SLURMCluster(**fast)
    pending = SLURMCluster(job_extra_directives=["--begin=now+1hour"], **fast)
    running.scale(jobs=1)
    pending.scale(jobs=1)
    running.wait_for_workers(gpus=1, timeout=180)
    while not all(job.job_id for job in pending.jobs):
        time.sleep(0.1)
    print("JOBS", *(job.job_id for c in (running, pending) for job in c.jobs), flush=True)
    print("READY", flush=True)
    if mode == "timeout":
        pending.wait_for_workers(gpus=1, timeout=1)
    elif mode == "close":
        running.close()
        pending.close()
    elif mode == "wait":
        time.sleep(600)


if __name__ == "__main__":
    main(*sys.argv[1:3])
