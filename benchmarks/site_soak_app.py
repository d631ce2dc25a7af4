"""The soak's computation, run on the site's login host by ``benchmarks/site_soak.py`` (through
``scripts/site-exec login``): ``python site_soak_app.py OPTIONS``.

An adaptive ``SLURMCluster`` (``OPTIONS``: its JSON, plus ``_soak``: ``seed``, ``max_jobs``,
``round_timeout``, ``phase``) and, until a line (or EOF) arrives on stdin, rounds of
computations whose answers are known: sums of squares over many tasks, a reduction over a
dask array whose chunks stay on the workers between rounds, a transpose-sum that moves chunks
between workers, sums of seeded random draws recomputed here. Busy phases (hundreds of slow
tasks) alternate with quiet ones, so that adapt grows and shrinks the cluster.

Each line of output is one JSON event: ``ready`` (the scheduler's address), ``round`` (values
checked and wrong, workers and their hosts), ``error`` (an exception the user's code saw),
``message`` (a warning or error that hpcgpu logged), ``summary`` (the cluster's failure
reports and events), ``closed``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import threading
import time

import dask.array as da
import numpy as np
from distributed import Client, futures_of

from hpcgpu.system.workers import scheduler_workers
from hpcgpu import SLURMCluster

_print_lock = threading.Lock()
START = time.monotonic()


def emit(event: str, **fields) -> None:
    line = json.dumps({"event": event, "t": round(time.monotonic() - START, 2), **fields}, default=str)
    with _print_lock:
        print(line, flush=True)


class Forward(logging.Handler):
    """hpcgpu's warnings and errors, and anyone's errors, as ``message`` events."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("hpcgpu") or record.levelno >= logging.ERROR:
            emit("message", logger=record.name, level=record.levelname, text=record.getMessage()[:2000])


def slow_square(x: int, pause: float) -> int:
    time.sleep(pause)
    return x * x


def seeded_sum(seed: int) -> int:
    return int(np.random.default_rng(seed).integers(0, 2**20, 2000).sum())


class Stopped(Exception):
    """The soak ended while a result was awaited: not an error."""


def awaited(future, timeout: float, stop: threading.Event):
    """``future.result()`` within ``timeout`` s, given up (``Stopped``) once ``stop`` is set."""
    end = time.monotonic() + timeout
    while True:
        try:
            return future.result(timeout=1)
        except TimeoutError:
            if stop.is_set():
                raise Stopped from None
            if time.monotonic() > end:
                raise TimeoutError(f"no result within {timeout} s") from None


# ---------------------------------------------------------------- the checks: (name, checked, wrong)
def squares(client, rng, get, busy):
    n = rng.randint(150, 300) if busy else rng.randint(4, 12)
    futures = client.map(slow_square, range(n), pause=0.3 if busy else 0.05, pure=False)
    got = get(client.submit(sum, futures))  # summed on a worker: results move between workers
    return "squares", 1, int(got != (n - 1) * n * (2 * n - 1) // 6)


def held_sum(client, held, expected, get):
    got = get(client.compute(held.sum()))
    return "held", 1, int(got != expected)


def transpose_sum(client, rng, get):
    n = rng.choice([200, 400, 600])
    x = da.arange(n * n, chunks=n * n // 4).reshape(n, n).rechunk(n // 2)
    got = get(client.compute((x + x.T).sum()))
    return "transpose", 1, int(got != n * n * (n * n - 1))


def seeded(client, rng, get):
    seeds = [rng.randrange(2**31) for _ in range(rng.randint(4, 16))]
    got = get(client.submit(list, client.map(seeded_sum, seeds)))
    wrong = sum(int(g != seeded_sum(s)) for g, s in zip(got, seeds, strict=True))
    return "seeded", len(seeds), wrong


def one_round(client, rng, held, expected, get, busy):
    checks = [lambda: squares(client, rng, get, busy), lambda: held_sum(client, held, expected, get),
              lambda: transpose_sum(client, rng, get), lambda: seeded(client, rng, get)]
    rng.shuffle(checks)
    checked, wrong = 0, 0
    for check in checks:
        kind, c, w = check()
        checked, wrong = checked + c, wrong + w
        if w:
            emit("wrong", kind=kind, wrong=w)
    return checked, wrong


def soak(cluster, settings, stop):
    rng = random.Random(settings["seed"])
    with Client(cluster) as client:
        def persisted():
            return (da.arange(400_000, chunks=20_000) % 997).persist()

        held = persisted()
        expected = int((np.arange(400_000) % 997).sum())
        rounds = 0

        def get(future):
            return awaited(future, settings["round_timeout"], stop)

        while not stop.is_set():
            busy = (time.monotonic() - START) // settings["phase"] % 2 == 1  # quiet, then busy, ...
            try:
                checked, wrong = one_round(client, rng, held, expected, get, busy)
                rounds += 1
                workers = scheduler_workers(client).values()
                emit("round", n=rounds, checked=checked, wrong=wrong, busy=bool(busy),
                     workers=len(workers), hosts=sorted({w["host"] for w in workers}),
                     jobs=len(cluster.worker_spec))
            except Stopped:
                break
            except Exception as error:  # the user's code saw it: record it, go on
                emit("error", type=type(error).__name__, text=str(error)[:2000])
                if any(f.status == "error" for f in futures_of(held)):  # e.g. KilledWorker: start anew
                    held = persisted()
                stop.wait(1)
            if not busy:
                stop.wait(1)


def main() -> None:
    options = json.loads(sys.argv[1])
    settings = options.pop("_soak")
    logging.getLogger().addHandler(Forward(logging.WARNING))
    logging.getLogger("distributed").addHandler(Forward(logging.ERROR))  # it does not propagate
    stop = threading.Event()

    def watch_stdin():
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    with SLURMCluster(**options) as cluster:
        cluster.adapt(minimum_jobs=1, maximum_jobs=settings["max_jobs"], interval="1s", wait_count=5)
        emit("ready", scheduler=cluster.scheduler_address, pid=os.getpid())
        try:
            soak(cluster, settings, stop)
        finally:
            emit("summary", failures=list(cluster.failures), events=list(cluster.events))
    emit("closed")


if __name__ == "__main__":
    main()
