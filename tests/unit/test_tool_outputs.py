"""Parsers against real tool outputs kept in tests/data/ (where each came from: tests/data/README.md)."""

from __future__ import annotations

from pathlib import Path

from hpcgpu.doctor.checks import check_gpu_links
from hpcgpu.network.probes import parse_gpu_list, parse_topo, parse_ucx_info
from hpcgpu.network import NetworkSettings

DATA = Path(__file__).parents[1] / "data"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def _all_pairs(n: int, kind: str) -> dict[str, str]:
    return {f"{i}-{j}": kind for i in range(n) for j in range(i + 1, n)}


def test_topo_of_a_real_4xh200_with_ansi_underlined_header():
    text = _read("nvidia-smi-topo-m.4xH200.txt")
    assert "\x1b[4m" in text  # the capture really carries the escapes
    assert parse_topo(text) == _all_pairs(4, "NV18")


def test_topo_of_a_real_2xh200():
    assert parse_topo(_read("nvidia-smi-topo-m.2xH200.txt")) == {"0-1": "NV18"}


def test_doctor_says_nvlink_all_to_all_on_the_real_4xh200():
    facts = {"gpus": {"gpus": [{"index": i, "name": "NVIDIA H200"} for i in range(4)]},
             "gpu_links": {"links": parse_topo(_read("nvidia-smi-topo-m.4xH200.txt"))}}
    check = check_gpu_links(facts, NetworkSettings.create("ucx"))
    assert (check.verdict, check.summary) == ("ok", "NVLink between all 4 GPUs (NV18)")


def test_doctor_says_it_could_not_read_an_incomplete_matrix():
    facts = {"gpus": {"gpus": [{"index": i} for i in range(4)]},
             "gpu_links": {"links": {"1-2": "X", "1-3": "NV18", "2-3": "X"}}}  # main's old misreading
    check = check_gpu_links(facts, NetworkSettings.create("ucx"))
    assert check.verdict == "warn" and "could not read" in check.summary and "GPU0-GPU1" in check.summary


def test_gpu_list_of_a_real_2xh200():
    assert parse_gpu_list(_read("nvidia-smi-L.2xH200.txt")) == [
        {"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}]


def test_ucx_info_of_the_cu13_wheel_on_a_gpu_node():
    info = parse_ucx_info(_read("ucx_info-v.2xH200.txt"), _read("ucx_info-d.2xH200.txt"))
    assert info["version"] == "1.22.0"
    assert (info["verbs"], info["rdmacm"]) == (False, False)
    assert info["transports"]["cuda_ipc"] == ["cuda"]
    assert info["transports"]["tcp"] == ["eth0", "lo"]


def test_ucx_info_of_the_cu12_wheel_on_a_cpu_machine():
    info = parse_ucx_info(_read("ucx_info-v.cpu-wheel.txt"), _read("ucx_info-d.cpu-wheel.txt"))
    assert info["version"] == "1.21.0"
    assert "cuda_ipc" not in info["transports"] and "lo" in info["transports"]["tcp"]


def test_squeue_and_scontrol_of_slurm_22_05():
    from hpcgpu.jobspec.dialects.slurm import SlurmDialect

    lines = _read("slurm-22.05-squeue-status.txt").splitlines()
    pending = SlurmDialect().parse_status("\n".join(lines[:2]))
    assert {s.state for s in pending.values()} == {"pending"} and len(pending) == 2
    later = SlurmDialect().parse_status("\n".join(lines[2:]))
    states = sorted((s.state, s.nodes, s.reason) for s in later.values())
    assert states == [("cancelled", (), "Priority"), ("failed", ("node3",), "NonZeroExitCode")]
    assert SlurmDialect().parse_exit_code(_read("slurm-22.05-scontrol-show-job-failed.txt")) == 3
    assert SlurmDialect().parse_exit_code(_read("slurm-22.05-scontrol-show-job-pending.txt")) == 0
