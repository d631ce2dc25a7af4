"""The sweep: for each cluster and GPU count, warm-up and repeated runs of each workload.

Every run ends as a record, whatever happens: a workload that raises, a run that times
out, a cluster that does not start, all become ``status="failed"`` records with the error,
so that a report can never silently lose the runs that went wrong.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from hpcgpu.bench.environment import backends, describe
from hpcgpu.bench.records import FAILED, OK, Environment, RunRecord
from hpcgpu.bench.registry import resolve_workloads
from hpcgpu.system.workers import scheduler_workers
from hpcgpu.bench.workload import PRESETS, SCALINGS, RunContext, Workload

__all__ = ["SweepSpec", "run_sweep", "write_outputs"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    root, seen = exc, 0
    while (root.__cause__ or root.__context__) is not None and seen < 10:
        root, seen = root.__cause__ or root.__context__, seen + 1
    if root is not exc:  # e.g. "Cluster failed to start" hides why
        text = f"{type(root).__name__}: {root} (in: {text})"
    return text if len(text) < 500 else text[:497] + "..."


@dataclass(frozen=True)
class SweepSpec:
    """What to run: workloads, GPU counts, size preset, scalings, repeats and warm-ups.

    Examples
    --------
    >>> SweepSpec(workloads=("svd",), gpus=(1, 2)).repeats
    3
    >>> SweepSpec(workloads=("svd",), gpus=(0, 2))
    Traceback (most recent call last):
    ...
    ValueError: gpus=(0, 2): every GPU count must be a positive integer (e.g. --gpus 1,2,4)
    """

    workloads: tuple[str, ...]
    gpus: tuple[int, ...]
    preset: str = "tiny"
    scalings: tuple[str, ...] = ("strong",)
    repeats: int = 3
    warmup: int = 1
    timeout: float | None = 600.0
    sweep: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def __post_init__(self) -> None:
        if not self.gpus or any(not isinstance(n, int) or n < 1 for n in self.gpus):
            raise ValueError(f"gpus={self.gpus!r}: every GPU count must be a positive integer (e.g. --gpus 1,2,4)")
        if self.preset not in PRESETS:
            raise ValueError(f"preset={self.preset!r} is unknown: choose from {', '.join(PRESETS)}")
        bad = [s for s in self.scalings if s not in SCALINGS]
        if bad or not self.scalings:
            raise ValueError(f"scalings={self.scalings!r}: choose from strong, weak (or both)")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats!r} must be at least 1 (e.g. --repeats 5)")
        if self.warmup < 0:
            raise ValueError(f"warmup={self.warmup!r} must be 0 or more")


@dataclass
class _Sweep:
    """The state of one sweep while it runs (records go to ``sink`` as they are made)."""

    spec: SweepSpec
    sink: Callable[[RunRecord], None]
    records: list[RunRecord] = field(default_factory=list)

    def emit(self, workload: Workload, scaling: str, gpus: int, env: Environment, repeat: int,
             warmup: bool, seconds: float | None, error: str | None) -> None:
        size = workload.size(self.spec.preset, gpus, scaling)
        record = RunRecord(
            sweep=self.spec.sweep, workload=workload.name, scaling=scaling, gpus=gpus,
            size=size.label, work=size.work, work_unit=size.unit, repeat=repeat, warmup=warmup,
            status=OK if error is None else FAILED, seconds=seconds, error=error, started=_now(), env=env)
        self.records.append(record)
        self.sink(record)

    def fail_all(self, workload: Workload, scaling: str, gpus: int, env: Environment, error: str) -> None:
        for repeat in range(self.spec.repeats):
            self.emit(workload, scaling, gpus, env, repeat, False, None, error)

    def measure(self, ctx: RunContext, workload: Workload, scaling: str, env: Environment) -> None:
        size = workload.size(self.spec.preset, ctx.gpus, scaling)
        try:
            state = workload.prepare(ctx, size) if workload.prepare else None
        except Exception as exc:
            self.fail_all(workload, scaling, ctx.gpus, env, "prepare: " + _error(exc))
            return
        from distributed import futures_of

        inputs = {future.key for future in futures_of(state)}
        ctx.results.clear()
        runs = [(i, True) for i in range(self.spec.warmup)] + [(i, False) for i in range(self.spec.repeats)]
        for repeat, warmup in runs:
            start = time.perf_counter()
            try:
                workload.run(ctx, size, state)
                seconds = time.perf_counter() - start
                ctx.forget_results(keep=inputs)  # untimed; the next run computes them again
            except Exception as exc:
                self.emit(workload, scaling, ctx.gpus, env, repeat, warmup, None, _error(exc))
            else:
                self.emit(workload, scaling, ctx.gpus, env, repeat, warmup, seconds, None)
        # Dropping the last reference releases the inputs. (client.cancel would also cancel
        # the next prepare's futures: the same graph has the same keys.)
        del state


def _base_env(target, gpus: int) -> Environment:
    protocol = getattr(target, "protocol", None) or "tcp"
    return Environment(cluster=target.label, path=target.path, protocol=protocol, gpus_per_node=gpus)


def _start_ups(sweep: _Sweep, target, gpus: int) -> list[tuple[int, bool, float | None, str | None]]:
    """Cluster start-ups before the main one: the warm-ups, then all but the last repeat.

    Returns (repeat, warmup, seconds, error) per start-up; they become records once the
    main session has told us the environment.
    """
    runs = [(i, True) for i in range(sweep.spec.warmup)] + [(i, False) for i in range(sweep.spec.repeats - 1)]
    out = []
    for repeat, warmup in runs:
        try:
            session = target.open(gpus)
        except Exception as exc:
            out.append((repeat, warmup, None, _error(exc)))
            continue
        session.close()
        out.append((repeat, warmup, session.bootstrap_seconds, None))
    return out


def _fail_open(sweep: _Sweep, target, gpus: int, workloads: list[Workload], error: str) -> None:
    env = _base_env(target, gpus)
    for workload in workloads:
        if workload.kind == "cluster":
            sweep.emit(workload, "weak", gpus, env, sweep.spec.repeats - 1, False, None, error)
        else:
            for scaling in sweep.spec.scalings:
                sweep.fail_all(workload, scaling, gpus, env, error)


def _at_gpu_count(sweep: _Sweep, target, gpus: int, workloads: list[Workload]) -> None:
    start_ups = [w for w in workloads if w.kind == "cluster"]
    earlier = {w.name: _start_ups(sweep, target, gpus) for w in start_ups}
    try:
        session = target.open(gpus)
    except Exception as exc:
        env = _base_env(target, gpus)
        for workload in start_ups:
            for repeat, warmup, seconds, error in earlier[workload.name]:
                sweep.emit(workload, "weak", gpus, env, repeat, warmup, seconds, error)
        _fail_open(sweep, target, gpus, workloads, "cluster: " + _error(exc))
        return
    try:
        workers = list(session.workers or sorted(scheduler_workers(session.client)))
        env, facts = describe(session.client, workers, target.label, target.path, session.protocol)
        array, frame = backends(facts)
        library = getattr(target, "library", "dask")
        env = replace(env, backend=f"{env.backend} ({library})")
        ctx = RunContext(session.client, gpus, session.workers, array, frame, sweep.spec.timeout, library)
        for workload in start_ups:
            for repeat, warmup, seconds, error in earlier[workload.name]:
                sweep.emit(workload, "weak", gpus, env, repeat, warmup, seconds, error)
            sweep.emit(workload, "weak", gpus, env, sweep.spec.repeats - 1, False, session.bootstrap_seconds, None)
        for workload in workloads:
            if workload.kind != "cluster":
                for scaling in sweep.spec.scalings:
                    sweep.measure(ctx, workload, scaling, env)
    finally:
        session.close()


def run_sweep(spec: SweepSpec, targets: Iterable, registry: dict[str, Workload] | None = None,
              sink: Callable[[RunRecord], None] = lambda record: None) -> list[RunRecord]:
    """Run ``spec`` on every target (cluster path) in turn; return every record.

    ``sink`` receives each record as soon as it exists (to write it and show progress).
    A workload of kind ``cluster`` (start-up time) needs targets that start their own
    workers: a ValueError says so before anything runs.
    """
    workloads = resolve_workloads(",".join(spec.workloads), registry)
    targets = list(targets)
    for target in targets:
        if not target.owns_workers and any(w.kind == "cluster" for w in workloads):
            raise ValueError("workload 'bootstrap' times worker start-up, so it needs a cluster the "
                             "harness starts: drop it with --scheduler-file/--scheduler-address/batch mode")
    sweep = _Sweep(spec, sink)
    for target in targets:
        for gpus in spec.gpus:
            _at_gpu_count(sweep, target, gpus, workloads)
    return sweep.records


def write_outputs(records: list[RunRecord], directory: str | Path, title: str = "", command: str = "") -> dict[str, Path]:
    """Write CSV, the markdown tables and the plots for ``records`` under ``directory``.

    Without matplotlib (the ``bench`` extra) the plots are left out and the table says so.
    """
    from hpcgpu.bench.plots import plot_sweeps
    from hpcgpu.bench.report import markdown_table, ratio_table, write_csv
    from hpcgpu.bench.stats import ratios, summarize

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    summaries = summarize(records)
    write_csv(directory / "results.csv", records)
    text = [f"# {title or 'hpcgpu bench'}\n"]
    if command:
        text.append(f"Command: `{command}`\n")
    text.append(_environment_text(records))
    text.append(markdown_table(summaries))
    side = ratios(summaries)
    if side:
        text.append("\nSide by side (hpcgpu median / reference median; below 1: hpcgpu faster):\n\n")
        text.append(ratio_table(side))
    can_plot = importlib.util.find_spec("matplotlib") is not None
    if not can_plot:
        text.append("\nNo plots: matplotlib is not installed (pip install 'hpcgpu[bench]').\n")
    (directory / "table.md").write_text("\n".join(text), encoding="utf-8")
    plots = plot_sweeps(summaries, directory / "plots") if can_plot else []
    return {"csv": directory / "results.csv", "table": directory / "table.md",
            **{f"plot:{p.stem}": p for p in plots}}


def _environment_text(records: list[RunRecord]) -> str:
    envs = {}
    for r in records:
        if r.env.dask_version:  # described by its workers (not a cluster that failed to start)
            envs.setdefault((r.env.cluster, r.env.protocol), r.env)
    lines = []
    for (cluster, protocol), env in sorted(envs.items()):
        lines.append(f"- {cluster} ({protocol}, {env.path}): {env.gpu_model or 'no GPU'}, driver "
                     f"{env.driver or '-'}, backend {env.backend}, host {env.hostname}, Python "
                     f"{env.python_version}, dask {env.dask_version}, distributed "
                     f"{env.distributed_version}, hpcgpu {env.hpcgpu_version}; {env.versions_text()}")
    return "\n".join(lines) + "\n"
