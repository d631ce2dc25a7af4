"""What a benchmark workload is: its sizes, the run context it computes through, the value.

A workload is a frozen value: how big it is at a preset and GPU count (``size``), what
to build untimed on the workers first (``prepare``), and the timed part (``run``).
The harness times ``run`` only, so a workload states plainly what it measures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcgpu.system.workers import scheduler_workers

__all__ = ["PRESETS", "SCALINGS", "Size", "Workload", "RunContext"]

#: Size presets, smallest first: tiny (tests), small (a CPU laptop), medium/large (GPUs),
#: full (the published reference sizes of docs/benchmarks.md).
PRESETS = ("tiny", "small", "medium", "large", "full")
SCALINGS = ("strong", "weak")


@dataclass(frozen=True)
class Size:
    """A workload's size at one GPU count: a label, the work done, and its parameters.

    ``work`` (in ``unit``: bytes ``B``, ``rows``, ``fits``, ``tasks``, ``workers``) divided
    by the median time is the throughput; under weak scaling it grows with the GPUs.
    """

    label: str
    work: float
    unit: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunContext:
    """What a workload sees: a client, the workers it may use, and the chunk backends.

    ``workers`` restricts every computation to those workers (``None``: all), which is
    how a sweep uses 1, 2, 4... GPUs of one allocation it did not start. ``library``
    says who builds the inputs: ``hpcgpu`` (:mod:`hpcgpu.array`/:mod:`hpcgpu.dataframe`)
    or ``dask`` (Dask's own constructors under ``array.backend``, as plain Dask users do).
    """

    client: Any
    gpus: int
    workers: tuple[str, ...] | None = None
    array_backend: str = "numpy"
    dataframe_backend: str = "pandas"
    timeout: float | None = None
    library: str = "dask"

    @property
    def _where(self) -> dict:
        if self.workers is None:
            return {}
        return {"workers": list(self.workers), "allow_other_workers": False}

    #: keys computed or persisted since the last :meth:`forget_results`
    results: list = field(default_factory=list, compare=False, repr=False)

    def compute(self, *collections) -> list:
        """Compute on the workers and gather the (small) results."""
        futures = self.client.compute(list(collections), **self._where)
        self.results.extend(future.key for future in futures)
        return self.client.gather(self._wait(futures))

    def persist(self, *collections) -> list:
        """Persist on the workers and wait until every chunk is in memory."""
        persisted = self.client.persist(list(collections), **self._where)
        from distributed import futures_of

        futures = futures_of(persisted)
        self.results.extend(future.key for future in futures)
        self._wait(futures)
        return persisted

    def forget_results(self, keep=frozenset()) -> None:
        """Wait until the scheduler holds none of the results since the last call but ``keep``
        (the inputs'), or raise ``TimeoutError`` after ``timeout`` (30 s without one).

        Why: the next run submits the same graph, so the same keys. While the last run's
        results were still in memory it found them there and measured nothing: Dask's svd
        ran in 0.015 s instead of 1 s, in 2 runs of 4 on a CPU host, whenever the release of
        the results had not reached the scheduler before the next graph did.
        """
        keys, timeout = set(self.results) - set(keep), self.timeout or 30.0
        self.results.clear()
        deadline = time.monotonic() + timeout
        while keys and (keys := set(self.client.run_on_scheduler(_still_in_memory, keys))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(keys)} result(s) of the last run still held after "
                                   f"{timeout:g} s, e.g. {sorted(map(str, keys))[0]}: a "
                                   "run must not keep its results (the next run would find them)")
            time.sleep(0.02)

    def submit(self, func: Callable, *args, worker: str | None = None, **kwargs):
        """``client.submit`` pinned to ``worker`` (or to the allowed workers)."""
        where = {"workers": [worker], "allow_other_workers": False} if worker else self._where
        return self.client.submit(func, *args, pure=False, **where, **kwargs)

    def worker_addresses(self) -> list[str]:
        """The workers this run may use, in a stable order."""
        if self.workers is not None:
            return list(self.workers)
        return sorted(scheduler_workers(self.client))

    def _wait(self, futures):
        from distributed import wait

        done = wait(futures, timeout=self.timeout)
        for future in done.done:
            if future.status == "error":
                future.result()  # raises the task's own exception
        return futures


def _still_in_memory(keys, dask_scheduler=None) -> list:
    """The ``keys`` that the scheduler still has in memory or computing (run there)."""
    tasks = dask_scheduler.tasks
    return [key for key in keys if key in tasks and tasks[key].state in ("memory", "processing", "waiting")]


@dataclass(frozen=True)
class Workload:
    """A named benchmark workload.

    ``size(preset, gpus, scaling) -> Size``; ``prepare(ctx, size) -> state`` runs
    untimed (may be ``None``); ``run(ctx, size, state)`` is timed. ``kind`` is
    ``array``, ``dataframe``, ``graph`` or ``cluster`` (the harness itself times cluster
    start-up for ``cluster`` workloads; their ``run`` is not called).
    """

    name: str
    description: str
    kind: str
    size: Callable[[str, int, str], Size]
    run: Callable[[RunContext, Size, Any], Any] | None
    prepare: Callable[[RunContext, Size], Any] | None = None
