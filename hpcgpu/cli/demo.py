"""``hpcgpu demo``: the reference workloads on whatever this machine or allocation has.

Inside a batch allocation (``DASK_SCHEDULER_ADDRESS`` set, as ``hpcgpu run`` does) it
connects to that scheduler; otherwise it starts a :class:`~hpcgpu.cluster.local.LocalGPUCluster`
(one worker per GPU, or CPU workers without GPUs). Sizes fit the machine: the GPU sizes
take seconds on one modern GPU, the CPU sizes about a minute on two cores.
"""

from __future__ import annotations

import contextlib
import json
import os

import click

from hpcgpu.system.workers import scheduler_workers

__all__ = ["demo", "SIZES", "plan", "header"]

#: (workload, builder keyword arguments) per kind of machine
SIZES = {
    "gpu": [("array-sum", dict(n=200_000, chunk=10_000)),
            ("svd", dict(rows=300_000, cols=1_000, chunk=1_000)),
            ("groupby", dict(days=30, freq="1s"))],
    "cpu": [("array-sum", dict(n=10_000, chunk=2_500)),
            ("svd", dict(rows=20_000, cols=100, chunk=100)),
            ("groupby", dict(days=7, freq="1s"))],
}


def plan(kind: str, scale: float = 1.0) -> list[tuple[str, dict]]:
    """The workloads and sizes for ``kind`` (``gpu``/``cpu``), the first dimension scaled.

    Examples
    --------
    >>> plan("cpu", 2)[0]
    ('array-sum', {'n': 20000, 'chunk': 2500})
    """
    out = []
    for name, kwargs in SIZES[kind]:
        kwargs = dict(kwargs)
        first = next(iter(kwargs))
        kwargs[first] = max(1, int(kwargs[first] * scale))
        out.append((name, kwargs))
    return out


@contextlib.contextmanager
def _client(scheduler: str | None):
    from distributed import Client

    address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        with Client(address) as client:
            yield client, f"scheduler {address}"
        return
    from hpcgpu.cluster.local import LocalGPUCluster

    with LocalGPUCluster(dashboard_address=None, silence_logs=40) as cluster, Client(cluster) as client:
        client.wait_for_workers(len(cluster.worker_spec), timeout=120)
        yield client, "LocalGPUCluster" if cluster.gpus else f"local CPU cluster; {why_no_gpu()}"


def why_no_gpu(nvml=None, gpus: int | None = None, cupy_found: bool | None = None) -> str:
    """Why the demo runs on the CPU, in the user's terms (each argument: as found here).

    Examples
    --------
    >>> why_no_gpu(nvml=None)
    'no NVIDIA driver here: NVML not found'
    >>> why_no_gpu(nvml=object(), gpus=0)
    'the NVIDIA driver sees no GPU, or CUDA_VISIBLE_DEVICES hides them'
    >>> why_no_gpu(nvml=object(), gpus=2, cupy_found=False)
    "2 GPU(s), but CuPy is not installed: pip install 'hpcgpu[cuda12]' (or cuda13)"
    """
    import importlib.util

    from hpcgpu.worker.gpuinfo import count_gpus, nvml_library

    nvml = nvml_library() if nvml is None and gpus is None else nvml
    if nvml is None:
        return "no NVIDIA driver here: NVML not found"
    gpus = count_gpus() if gpus is None else gpus
    if gpus == 0:
        return "the NVIDIA driver sees no GPU, or CUDA_VISIBLE_DEVICES hides them"
    if not (importlib.util.find_spec("cupy") is not None if cupy_found is None else cupy_found):
        return f"{gpus} GPU(s), but CuPy is not installed: pip install 'hpcgpu[cuda12]' (or cuda13)"
    return f"{gpus} GPU(s), but CuPy cannot use them: hpcgpu doctor says why"


def worker_gpus(client) -> list[dict]:
    """What each worker's preload recorded about its GPU (``WorkerState.extra["hpcgpu"]``,
    which the scheduler's worker identity shows at its top level)."""
    workers = scheduler_workers(client).values()
    return [w["hpcgpu"] for w in workers if "hpcgpu" in w]


def _kind(client) -> str:
    gpu = any(info.get("gpu_present") for info in worker_gpus(client))
    from hpcgpu.system.backends import module_usable

    return "gpu" if gpu and module_usable("cupy") else "cpu"


def header(nworkers: int, kind: str, where: str):
    """The demo's first line as rich text, not markup: markup would take the ``[cuda12]`` of
    ``pip install 'hpcgpu[cuda12]'`` in ``where`` for a tag."""
    from rich.text import Text

    return Text.assemble(("hpcgpu demo", "bold"), f": {nworkers} {kind.upper()} workers ({where})")


def _table(rows: list[dict]):
    from rich.table import Table

    table = Table(title="hpcgpu demo")
    for column in ("workload", "size", "backend", "workers", "seconds", "GB/s"):
        table.add_column(column, justify="right" if column in ("workers", "seconds", "GB/s") else "left")
    for r in rows:
        table.add_row(r["workload"], r["size"], r["backend"], str(r["workers"]),
                      f"{r['seconds']:.2f}", f"{r['gbps']:.2f}")
    return table


@click.command()
@click.option("--scheduler", default=None, help="Scheduler address (default: $DASK_SCHEDULER_ADDRESS, else a local cluster).")
@click.option("--scale", type=float, default=1.0, show_default=True, help="Multiply the first dimension of each size.")
@click.option("--workload", "names", multiple=True, help="Run only these (array-sum, svd, groupby).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write the rows as JSON.")
def demo(scheduler, scale, names, json_path) -> None:
    """Run array-sum, svd and groupby on this machine's GPUs (or CPUs) and print a table."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from hpcgpu.bench import reference as workloads

    console = Console()
    rows = []
    with _client(scheduler) as (client, where):
        kind = _kind(client)
        nworkers = len(scheduler_workers(client))
        console.print(header(nworkers, kind, where), soft_wrap=True)  # one line, also in a log
        todo = [(n, kw) for n, kw in plan(kind, scale) if not names or n in names]
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            overall = progress.add_task("workloads", total=len(todo))
            for name, kwargs in todo:
                progress.update(overall, description=f"{name} {kwargs}")
                backend = "gpu" if kind == "gpu" else "cpu"
                if name == "groupby" and kind == "gpu":
                    from hpcgpu.system.backends import module_usable

                    backend = "gpu" if module_usable("cudf") else "cpu"
                timing = workloads.run(workloads.WORKLOADS[name](**kwargs, backend=backend), client)
                w = timing.workload
                rows.append(dict(workload=w.name, size=w.size, backend=w.backend, workers=nworkers,
                                 seconds=timing.seconds, gbps=timing.gbps, nbytes=w.nbytes))
                progress.advance(overall)
    console.print(_table(rows))
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(rows, handle, indent=1)
