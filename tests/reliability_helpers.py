"""Workloads for the reliability tests: a chain of tasks that logs every execution."""

from __future__ import annotations

import os
import time
from collections import Counter

from distributed import Client

from conftest import wait_for


def _make_step():
    # Nested, so that it is pickled by value: the workers cannot import this test module.
    def step(previous: int, i: int, log: str, pause: float) -> int:
        """One link of a chain; appends its index to ``log`` so reruns are visible."""
        time.sleep(pause)
        with open(log, "a") as file:
            file.write(f"{i}\n")
        return previous + i

    return step


step = _make_step()


def run_chain(client: Client, n: int, log: str, pause: float) -> list:
    """n tasks in a chain, every intermediate result kept (held by some worker)."""
    futures = [client.submit(step, 0, 0, log, pause, key="link-0")]
    for i in range(1, n):
        futures.append(client.submit(step, futures[-1], i, log, pause, key=f"link-{i}"))
    return futures


def runs(log: str) -> Counter:
    with open(log) as file:
        return Counter(int(line) for line in file if line.strip())


def lose_the_job_mid_chain(cluster, log: str, kill, gpus: int, n: int, started: int):
    """Adapt to one job, run a chain of ``n`` logged tasks, and ``kill(job_id)`` that job once
    ``started`` links ran; the chain must still give the right results. Returns the killed
    job and how often each link ran."""
    cluster.adapt(minimum_jobs=1, maximum_jobs=1, interval="300ms")
    cluster.wait_for_workers(gpus=gpus, timeout=60)
    (first,) = cluster.jobs
    with Client(cluster) as client:
        futures = run_chain(client, n, log, pause=0.5)
        wait_for(lambda: os.path.exists(log) and len(runs(log)) >= started, 60,
                 what="part of the chain to run")
        kill(first.job_id)
        assert client.gather(futures) == [sum(range(i + 1)) for i in range(n)]
    return first, runs(log)
