"""``hpcgpu bench``: scaling sweeps of the named workloads on any cluster path."""

from __future__ import annotations

import importlib.util
import logging
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from hpcgpu.schedulers.registry import scheduler_names

__all__ = ["bench", "parse_gpus", "parse_options", "make_targets"]

REFERENCES = ("dask-cuda", "plain")
#: reference -> (module it needs, how to install it)
_REFERENCE_NEEDS = {"dask-cuda": ("dask_cuda", "pip install 'hpcgpu[cuda12]' (dask-cuda and CuPy; "
                                               "hpcgpu[cuda13] for CUDA 13)")}


def parse_gpus(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``.

    Examples
    --------
    >>> parse_gpus("1, 2,4")
    (1, 2, 4)
    >>> parse_gpus("1,two")
    Traceback (most recent call last):
    ...
    ValueError: --gpus '1,two' is not a list of GPU counts: write e.g. --gpus 1,2,4
    """
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--gpus {text!r} is not a list of GPU counts: write e.g. --gpus 1,2,4") from None
    if not counts or min(counts) < 1:
        raise ValueError(f"--gpus {text!r}: GPU counts must be positive: write e.g. --gpus 1,2,4")
    return counts


def parse_options(pairs: tuple[str, ...]) -> dict[str, object]:
    """``("memory_per_gpu=60GB", "cpus_per_gpu=8")`` -> keyword arguments (ints as ints).

    Examples
    --------
    >>> parse_options(("cpus_per_gpu=8", "queue=gpu"))
    {'cpus_per_gpu': 8, 'queue': 'gpu'}
    """
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--cluster-option {pair!r} is not KEY=VALUE (e.g. --cluster-option queue=gpu)")
        options[key.strip().replace("-", "_")] = int(value) if value.strip().isdigit() else value.strip()
    return options


def make_targets(kw: dict) -> list:
    """The cluster path(s) the options name, primary first, then the references."""
    from hpcgpu.bench import targets as t

    compare = [c.strip() for c in (kw["compare"] or "").split(",") if c.strip()]
    unknown = [c for c in compare if c not in REFERENCES]
    if unknown:
        raise ValueError(f"--compare {kw['compare']!r}: unknown {unknown}; choose from {', '.join(REFERENCES)}")
    _check_references_installed(compare)
    address = kw["scheduler_address"] or (os.environ.get("DASK_SCHEDULER_ADDRESS") if kw["scheduler"] is None else None)
    local = kw["scheduler"] in (None, "local") and not (kw["scheduler_file"] or address)
    if compare and not local:
        raise ValueError("--compare runs the references on this machine's GPUs: use it with the local path only")
    if kw["scheduler_file"] or address:
        path = "batch" if not (kw["scheduler_file"] or kw["scheduler_address"]) else "scheduler"
        primary = t.ExistingTarget(address=None if kw["scheduler_file"] else address,
                                   scheduler_file=kw["scheduler_file"], path=path)
    elif kw["scheduler"] in (None, "local"):
        primary = t.LocalTarget(protocol=kw["protocol"], threads_per_worker=kw["threads_per_worker"])
    else:
        options = parse_options(kw["cluster_option"])
        for name in ("queue", "account", "walltime"):
            if kw[name]:
                options[name] = kw[name]
        primary = t.JobQueueTarget(kw["scheduler"], kw["gpus_per_node"], options,
                                   protocol=None if kw["protocol"] == "tcp" else kw["protocol"])
    refs = {"dask-cuda": t.DaskCudaTarget(protocol=kw["protocol"]),
            "plain": t.PlainTarget(protocol=kw["protocol"], threads_per_worker=kw["threads_per_worker"])}
    if kw.get("collections", "hpcgpu") != "hpcgpu":
        primary = replace(primary, library=kw["collections"])
    return [primary, *(refs[c] for c in compare)]


def _check_references_installed(compare: list[str]) -> None:
    for name in compare:
        module, install = _REFERENCE_NEEDS.get(name, (None, ""))
        if module and importlib.util.find_spec(module) is None:
            raise ValueError(
                f"--compare {name} needs the {module.replace('_', '-')} package, which this Python "
                f"({sys.executable}) does not have: {install}, or leave {name} out of --compare")


def _workloads(workloads: str, targets: list) -> tuple[str, ...]:
    """The names to run; ``all`` leaves out what the targets cannot measure, and says so."""
    from hpcgpu.bench.registry import resolve_workloads

    chosen = resolve_workloads(workloads)
    if workloads.strip() in ("", "all") and not all(t.owns_workers for t in targets):
        skipped = [w.name for w in chosen if w.kind == "cluster"]
        chosen = [w for w in chosen if w.kind != "cluster"]
        if skipped:
            click.echo(f"all: leaving out {', '.join(skipped)}: it times worker start-up, which "
                       "needs a cluster the harness starts", err=True)
    return tuple(w.name for w in chosen)


def _progress(record) -> None:
    what = f"{record.workload:<13} {record.scaling:<6} {record.gpus:>3} GPU [{record.env.cluster} {record.env.protocol}]"
    run = f"{'warm-up' if record.warmup else 'run'} {record.repeat + 1}"
    result = f"{record.seconds:.4g} s" if record.ok else f"FAILED {record.error}"
    click.echo(f"{what} {run}: {result}", err=True)


@click.command()
@click.argument("workloads", default="array-sum,noop,transpose-sum,svd,groupby,many-fits")
@click.option("--gpus", default="1", show_default=True, help="GPU counts of the sweep, e.g. 1,2,4,8.")
@click.option("--size", "preset", default="small", show_default=True,
              type=click.Choice(["tiny", "small", "medium", "large", "full"]), help="Size preset (full: published sizes).")
@click.option("--scaling", default="strong", show_default=True, type=click.Choice(["strong", "weak", "both"]))
@click.option("--repeats", default=3, show_default=True, help="Measured runs per point.")
@click.option("--warmup", default=1, show_default=True, help="Warm-up runs per point (recorded, not aggregated).")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds one run may take before it counts as failed.")
@click.option("--scheduler", default=None, type=click.Choice(["local", *scheduler_names()]),
              help="Cluster mode through hpcgpu's Cluster class (default: local, or the batch allocation).")
@click.option("--scheduler-file", default=None, help="Use a running scheduler (its scheduler file).")
@click.option("--scheduler-address", default=None, help="Use a running scheduler (its address).")
@click.option("--protocol", default="tcp", show_default=True, type=click.Choice(["tcp", "ucx", "ucxx", "tls"]))
@click.option("--compare", default=None, help="References run side by side: dask-cuda,plain.")
@click.option("--gpus-per-node", default=4, show_default=True, help="Cluster mode: GPUs per node (per job).")
@click.option("--queue", "-q", default=None, help="Cluster mode: partition / queue.")
@click.option("--account", "-A", default=None, help="Cluster mode: account / project.")
@click.option("--walltime", default="00:30:00", show_default=True, help="Cluster mode: walltime per job.")
@click.option("--cluster-option", multiple=True, metavar="KEY=VALUE", help="More Cluster keyword arguments.")
@click.option("--collections", default="hpcgpu", show_default=True, type=click.Choice(["hpcgpu", "dask"]),
              help="Who builds the inputs on hpcgpu's workers: hpcgpu.array/dataframe or Dask's own.")
@click.option("--threads-per-worker", default=1, show_default=True, help="Local CPU fallback: threads per worker.")
@click.option("--out", "out", default=None, help="Output folder (default: hpcgpu-bench-<time>).")
@click.option("--title", default="", help="Title of the table.")
@click.option("--from-jsonl", "from_jsonl", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Run nothing: report the records of these results.jsonl files together (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the workloads and exit.")
def bench(workloads: str, **kw) -> None:
    """Run scaling sweeps of named WORKLOADS (comma-separated, or all) and report them.

    \b
    Writes OUT/results.jsonl (one line per run, as it ends), results.csv, table.md and
    plots/<workload>-<scaling>.png. Exit status 3 when any run failed (still reported).
    \b
    Examples:
      hpcgpu bench array-sum,svd --gpus 1,2,4 --compare dask-cuda,plain
      hpcgpu bench all --scheduler slurm --gpus 1,2,4,8 --gpus-per-node 4 -q gpu
      hpcgpu run benchmarks/bench.py array-sum --gpus 1,2,4   # inside an allocation
    """
    from hpcgpu.bench.registry import resolve_workloads

    if kw["list_only"]:
        for w in resolve_workloads("all"):
            click.echo(f"{w.name:<14} {w.kind:<10} {w.description}")
        return
    if kw["from_jsonl"]:
        records, out = _report(kw)
        sys.exit(3 if any(not r.ok for r in records) else 0)
    try:
        records, out = _run(workloads, kw)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if any(not r.ok for r in records):
        click.echo(f"some runs FAILED: see {out / 'table.md'}", err=True)
        sys.exit(3)


def _report(kw: dict):
    from hpcgpu.bench.report import append_jsonl, read_jsonl
    from hpcgpu.bench.runner import write_outputs

    records = [r for path in kw["from_jsonl"] for r in read_jsonl(path)]
    out = Path(kw["out"] or "hpcgpu-bench-report")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").unlink(missing_ok=True)
    for record in records:
        append_jsonl(out / "results.jsonl", record)
    paths = write_outputs(records, out, kw["title"], "hpcgpu bench --from-jsonl " + " ".join(kw["from_jsonl"]))
    click.echo(paths["table"].read_text(encoding="utf-8"))
    return records, out


def _run(workloads: str, kw: dict):
    from hpcgpu.bench.report import append_jsonl
    from hpcgpu.bench.runner import SweepSpec, run_sweep, write_outputs

    targets = make_targets(kw)
    names = _workloads(workloads, targets)
    scalings = ("strong", "weak") if kw["scaling"] == "both" else (kw["scaling"],)
    spec = SweepSpec(names, parse_gpus(kw["gpus"]), kw["preset"], scalings, kw["repeats"],
                     kw["warmup"], kw["timeout"])
    out = Path(kw["out"] or time.strftime("hpcgpu-bench-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "results.jsonl"
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)  # p2p's per-shuffle chatter

    def sink(record) -> None:
        append_jsonl(jsonl, record)
        _progress(record)

    records = run_sweep(spec, targets, sink=sink)
    argv = sys.argv[1:]  # written as the equivalent ``hpcgpu bench`` command
    argv = argv[argv.index("bench") + 1:] if "bench" in argv else argv
    command = " ".join(shlex.quote(a) for a in ["hpcgpu", "bench", *argv])
    paths = write_outputs(records, out, kw["title"], command)
    click.echo(paths["table"].read_text(encoding="utf-8"))
    click.echo(f"wrote {jsonl}, {paths['csv']}, {paths['table']} and {len(paths) - 2} plots under {out}/plots", err=True)
    return records, out
