"""The request checked against what the partition's nodes have (``sinfo``), before submitting.

tests/data/sinfo-node.txt is ``sinfo --noheader --Node --format='%N|%c|%m|%G|%P'`` on the
local SLURM 22.05 (4 nodes x 32 CPUs x 256 GiB x 4 GPUs of type h100; partitions debug*, gpu).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from hpcgpu import SLURMCluster
from hpcgpu.system import commands
from hpcgpu.jobspec.partition import parse_sinfo, shape_problem
from hpcgpu.jobspec.resources import GPUJobShape

SINFO = (Path(__file__).parents[1] / "data" / "sinfo-node.txt").read_text()


def test_the_captured_partitions():
    for partition in (None, "gpu", "debug"):
        nodes = parse_sinfo(SINFO, partition)
        assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
        assert {(n.cpus, n.memory, n.gpus) for n in nodes} == {(32, 256 * 2**30, (("h100", 4),))}
    assert parse_sinfo(SINFO, "nosuch") == []


@pytest.mark.parametrize("options, words", [
    (dict(gpus_per_node=8), "gpus_per_node=8 is more than the 4 GPUs a node of the default "
                            "partition has (gpu:h100:4 on node1, node2, node3 and 1 more): "
                            "use gpus_per_node<=4 and more nodes, or another partition"),
    (dict(gpus_per_node=2, gpu_type="a100", queue="gpu"),
     "gpu_type='a100': the nodes of partition 'gpu' have GPUs of type h100: use gpu_type='h100'"),
    (dict(gpus_per_node=4, cpus_per_gpu=9), "= 36 CPUs is more than the 32 a node of the "
                                            "default partition has: use cpus_per_gpu<=8"),
    (dict(gpus_per_node=4, memory_per_gpu="100GiB"),
     "memory per node (400 GiB) is more than the 256 GiB a node of the default partition has: "
     "ask for memory_per_gpu<=64GiB"),
    (dict(nodes=5, gpus_per_node=1), "nodes=5 is more than the 4 node(s)"),
])
def test_what_does_not_fit_names_the_field_what_nodes_have_and_the_fix(options, words):
    assert words in shape_problem(GPUJobShape.create(**options), parse_sinfo(SINFO, options.get("queue")))


def test_what_fits_passes_and_unknown_changes_nothing():
    fits = GPUJobShape.create(nodes=4, gpus_per_node=4, cpus_per_gpu=8, memory_per_gpu="64GiB",
                              gpu_type="h100")
    assert shape_problem(fits, parse_sinfo(SINFO)) is None
    assert shape_problem(GPUJobShape.create(gpus_per_node=64), []) is None


@given(st.lists(st.tuples(st.integers(1, 512), st.integers(1, 10**7),
                          st.sampled_from(["", "h100", "a100"]), st.integers(0, 16)),
                min_size=1, max_size=6))
def test_sinfo_lines_parse_back(rows):
    lines = [f"n{i}|{c}|{m}|{f'gpu:{t}:{g}' if t else f'gpu:{g}' if g else '(null)'}|p*"
             for i, (c, m, t, g) in enumerate(rows)]
    nodes = parse_sinfo("\n".join(lines))
    assert [(n.cpus, n.memory // 2**20, n.gpu_count) for n in nodes] == [
        (c, m, g if (t or g) else 0) for c, m, t, g in rows]


def test_cluster_refuses_before_submitting(slurm, tmp_path):
    seen = []
    real = commands.runner
    commands.set_runner(lambda argv, timeout, input: seen.append(argv) or real(argv, timeout, input))
    try:
        with pytest.raises(ValueError, match="gpu_type='a100': the nodes of partition 'gpu'"):
            SLURMCluster(gpus_per_node=1, gpu_type="a100", queue="gpu", log_directory=str(tmp_path))
    finally:
        commands.set_runner(None)
    assert {argv[0] for argv in seen} == {"sinfo"}  # asked, nothing submitted


def test_jobscript_check_refuses_with_the_field(slurm):
    argv = [sys.executable, "-m", "hpcgpu", "jobscript", "slurm", "--gpus-per-node", "8", "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "REFUSED: gpus_per_node=8 is more than the 4 GPUs" in done.stderr
    assert "sbatch" not in done.stderr  # refused before asking sbatch --test-only
