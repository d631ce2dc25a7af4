"""``hpcgpu demo`` on this machine (CPU workers of a LocalGPUCluster when there is no GPU)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from distributed import Client

from hpcgpu.cli.demo import _kind, demo, worker_gpus
from hpcgpu.cluster.local import LocalGPUCluster


def test_demo_sees_each_workers_gpu_record_and_picks_the_backend():
    with LocalGPUCluster(n_workers=2, gpus=[], dashboard_address=None, silence_logs=40) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        records = worker_gpus(client)
        assert len(records) == 2 and all(r["gpu_present"] is False for r in records)
        assert _kind(client) == "cpu"


def test_demo_prints_and_writes_the_table(tmp_path):
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(demo, ["--workload", "array-sum", "--scale", "0.2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [r["workload"] for r in rows] == ["array-sum"] and rows[0]["backend"] == "numpy"
    assert rows[0]["seconds"] > 0 and "hpcgpu demo" in result.output
    # on a machine without GPUs it says why it runs on the CPU (#43 item 5)
    assert "local CPU cluster; no NVIDIA driver here" in " ".join(result.output.split()), result.output
    # one line, as README.md quotes it, also where the output is no terminal (rich's 80 columns)
    first = result.output.splitlines()[0]
    assert first.startswith("hpcgpu demo: ") and first.endswith(")"), result.output


def test_a_cpu_worker_logs_no_gpu_set_up(caplog):
    from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
    from hpcgpu.worker.gpuworker import prepare_gpu

    with caplog.at_level("INFO", logger="distributed.hpcgpu"):
        prepare_gpu(GPUWorkerOptions(), None, {})
    assert "GPU set-up" not in caplog.text


def test_the_readme_quotes_the_demos_reasons_for_the_cpu():
    """README.md tells a new user why the demo may run on CPU workers in the demo's own words."""
    from pathlib import Path

    from hpcgpu.cli.demo import why_no_gpu

    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    reasons = [why_no_gpu(nvml=None), why_no_gpu(nvml=object(), gpus=0),
               why_no_gpu(nvml=object(), gpus=2, cupy_found=False).split("but ", 1)[1]]
    for reason in reasons:
        assert reason in readme, reason


def test_the_header_keeps_the_extras_the_reason_names():
    """``hpcgpu demo``'s first line passed the reason through rich markup, which took the
    ``[cuda12]`` of ``pip install 'hpcgpu[cuda12]'`` for a tag (#43 item 5a's class)."""
    import io

    from rich.console import Console

    from hpcgpu.cli.demo import header, why_no_gpu

    reason = why_no_gpu(nvml=object(), gpus=2, cupy_found=False)
    console = Console(file=io.StringIO(), width=300)
    console.print(header(2, "cpu", f"local CPU cluster; {reason}"))
    assert console.file.getvalue() == (
        "hpcgpu demo: 2 CPU workers (local CPU cluster; 2 GPU(s), but CuPy is not installed: "
        "pip install 'hpcgpu[cuda12]' (or cuda13))\n")
