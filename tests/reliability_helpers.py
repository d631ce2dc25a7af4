"""Workloads for the reliability tests: a chain of tasks that logs every execution."""

from __future__ import annotations

import time
from collections import Counter

from distributed import Client


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
