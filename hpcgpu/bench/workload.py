"""What a benchmark workload is: its sizes, the run context it computes through, the value.

A workload is a frozen value: how big it is at a preset and GPU count (``size``), what
to build untimed on the workers first (``prepare``), and the timed part (``run``).
The harness times ``run`` only, so a workload states plainly what it measures.
"""

from __future__ import annotations

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

    def compute(self, *collections) -> list:
        """Compute on the workers and gather the (small) results."""
        futures = self.client.compute(list(collections), **self._where)
        return self.client.gather(self._wait(futures))

    def persist(self, *collections) -> list:
        """Persist on the workers and wait until every chunk is in memory."""
        persisted = self.client.persist(list(collections), **self._where)
        from distributed import futures_of

        self._wait(futures_of(persisted))
        return persisted

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
