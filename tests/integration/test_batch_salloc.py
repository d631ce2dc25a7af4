"""``hpcgpu run`` in salloc's shell and under srun: the allocation read from the variables
SLURM sets there (captured on the local SLURM 22.05 in tests/data/slurm-env/), and a real
``salloc``.

=================  ====================================================================
salloc-<shape>     ``env`` in the shell of ``salloc <options>`` (the login node's shell)
  .step.<rank>     ``env`` in each task of a plain ``srun`` inside that salloc
srun-<shape>       ``env`` in the one task of ``srun <options>`` run on its own
=================  ====================================================================

Shapes: gpn2 ``-N1 --gpus-per-node=2``, n2gpn2 ``-N2 --gpus-per-node=2``, gpt1
``--ntasks=2 --gpus-per-task=1``, gpus3 ``-N2 --gpus=3``, gres2 ``--gres=gpu:2``, excl
``-N1 --exclusive``, gpus2 ``--gpus=2``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from batchtools import CHECK
from hpcgpu.runner.allocation import _tres_gpus, detect_allocation

DATA = Path(__file__).parents[1] / "data" / "slurm-env"


def env_of(name: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (DATA / name).read_text().splitlines() if "=" in line)


def login_node_gpus():
    raise AssertionError("salloc's shell runs on the login node: its GPUs are not the job's")


#: salloc shape -> (nodes, GPUs per node, GPUs in all)
SALLOC = {"gpn2": (1, 2, 2), "n2gpn2": (2, 2, 4), "gpt1": (1, 2, 2), "gpus3": (2, 2, 3)}


@pytest.mark.parametrize("shape", SALLOC)
def test_salloc_shell_reads_the_request(shape):
    a = detect_allocation(env_of(f"salloc-{shape}.env"), probe_gpus=login_node_gpus)
    assert (a.nodes, a.gpus_per_node, a.total_gpus) == SALLOC[shape], a


@pytest.mark.parametrize("shape", ["gres2", "excl"])
def test_salloc_shell_without_a_gpu_count_says_what_to_do(shape):
    env = {**env_of(f"salloc-{shape}.env"), "CUDA_VISIBLE_DEVICES": "0"}  # the login node's
    with pytest.raises(ValueError, match="SLURM sets no GPU count in salloc's shell for --gres"):
        detect_allocation(env, probe_gpus=login_node_gpus)
    assert detect_allocation(env, gpus_per_node=2).total_gpus == 2


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("s*.step.0.env")
                                        if "excl" not in p.name))
def test_one_task_of_srun_reads_its_node(name):
    env = env_of(name)
    a = detect_allocation(env, probe_gpus=lambda: None)
    assert a.gpus_per_node == int(env["SLURM_GPUS_ON_NODE"]), a


@given(st.integers(1, 64), st.sampled_from(["", "h100:", "a100_3g.20gb:"]),
       st.sampled_from(["", "cpu=4,"]))
def test_tres_per_task_gpus(count, kind, cpus):
    # SLURM 23.02+ form (SLURM docs; 22.05 here does not set it)
    value = f"{cpus}gres/gpu{':' + kind.rstrip(':') if kind else ''}={count}"
    assert _tres_gpus(value) == count
    env = {"SLURM_JOB_ID": "1", "SLURM_NNODES": "1", "SLURM_NTASKS": "2", "SLURM_TRES_PER_TASK": value}
    a = detect_allocation(env, probe_gpus=login_node_gpus)
    assert (a.gpus_per_task, a.total_gpus) == (count, 2 * count)


@pytest.mark.slurm
def test_hpcgpu_run_inside_salloc(slurm, tmp_path):
    """The reported case: salloc --gpus-per-node=2, then hpcgpu run in its shell."""
    argv = ["salloc", "-N1", "--gpus-per-node=2", "--mem=2G", "--time=5",
            "--job-name=hpcgpu-salloc-test", sys.executable, "-m", "hpcgpu", "run",
            "--dashboard-address", "", "--work-dir", str(tmp_path / "work"), str(CHECK),
            "--expect", "2"]
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "2/2 worker(s) connected after" in done.stderr, done.stderr[-4000:]
