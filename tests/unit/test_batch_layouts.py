"""The allocation shapes sites document, read from environments captured in real SLURM jobs.

tests/data/slurm-env/<shape>.batch.env is ``env`` in the batch script of a job submitted on
the local SLURM 22.05 (4 nodes x 4 fake GPUs) with the shape's options;
<shape>.step.<rank>.env is ``env`` in each task of a plain ``srun`` inside it:

=======  ==================================================
gpt1     -N1 --ntasks=2 --gpus-per-task=1
gpt1c    -N1 --ntasks=2 --gpus-per-task=1 -c 2
n2gpt1   -N2 --ntasks-per-node=2 --gpus-per-task=1
gpn2     -N2 --gpus-per-node=2 --ntasks-per-node=1
gpn2c    -N2 --gpus-per-node=2 --ntasks-per-node=1 -c 4
gres2    --gres=gpu:2
gpus3    -N2 --gpus=3        (2 GPUs on one node, 1 on the other)
gpus3c   -N2 --gpus=3 -c 2
excl     -N1 --exclusive     (no GPU option)
=======  ==================================================
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.runner.allocation import _min_cpus, detect_allocation
from hpcgpu.runner.launch import launcher_environment, started_per_task, workers_argv
from hpcgpu.worker.placement import (node_placements, physical_gpu, placement_from_env,
                                     shared_gpu_error)
from hpcgpu.jobspec.worker_command import WorkerCommand

DATA = Path(__file__).parents[1] / "data" / "slurm-env"
#: shape -> GPUs, hence workers, in the allocation
SHAPES = {"gpt1": 2, "gpt1c": 2, "n2gpt1": 4, "gpn2": 4, "gpn2c": 4, "gres2": 2, "gpus3": 3,
          "gpus3c": 3, "excl": 4}
#: shapes whose plain srun step is the step hpcgpu starts (the others add options)
SAME_STEP = ("gpt1", "gpt1c", "n2gpt1", "gpn2", "gpn2c", "gres2", "gpus3", "gpus3c")


def env_of(name: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (DATA / name).read_text().splitlines() if "=" in line)


def steps_of(shape: str) -> list[dict[str, str]]:
    return [env_of(p.name) for p in sorted(DATA.glob(f"{shape}.step.*.env"))]


def argv_of(shape: str, launcher: str = "srun") -> list[str]:
    allocation = detect_allocation(env_of(f"{shape}.batch.env"), probe_gpus=lambda: None)
    return workers_argv(allocation, get_launcher(launcher), WorkerCommand(scheduler="tls://x:1"), "py")


def option(argv: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), None)


@pytest.mark.parametrize("shape", SHAPES)
def test_one_worker_per_allocated_gpu(shape):
    allocation = detect_allocation(env_of(f"{shape}.batch.env"), probe_gpus=lambda: None)
    assert allocation.total_gpus == SHAPES[shape]


@pytest.mark.parametrize("shape", SHAPES)
def test_srun_asks_only_for_the_cpus_the_allocation_has(shape):
    # main asked for cpus_per_gpu x G per node task: "More processors requested than permitted"
    env, argv = env_of(f"{shape}.batch.env"), argv_of(shape)
    per_task = int(option(argv, "cpus-per-task"))
    tasks_per_node = int(option(argv, "ntasks-per-node") or
                         -(-int(option(argv, "ntasks")) // int(option(argv, "nodes"))))
    assert per_task * tasks_per_node <= _min_cpus(env["SLURM_JOB_CPUS_PER_NODE"]), argv


@pytest.mark.parametrize("shape", ["gpt1", "gpt1c", "n2gpt1"])
def test_gpus_bound_to_tasks_get_one_task_per_gpu(shape):
    argv = argv_of(shape)
    assert option(argv, "gpus-per-task") == "1" and option(argv, "ntasks") == str(SHAPES[shape])
    assert "--gpus-per-node" not in argv[argv.index("hpcgpu.worker"):], argv


def test_nodes_with_different_gpu_counts_take_what_each_node_has():
    argv = argv_of("gpus3")
    assert option(argv, "gpus-per-node") is None  # a per-node count would not fit 2 + 1
    assert argv[-2:] == ["--gpus-per-node", "all"]


def test_exclusive_step_asks_for_the_nodes_gpus():
    # the plain step of an --exclusive job sees no GPU (captured): the step must ask
    assert "CUDA_VISIBLE_DEVICES" not in steps_of("excl")[0]
    assert option(argv_of("excl"), "gpus-per-node") == "4"


def places_in_step(shape: str) -> list[tuple[str, str]]:
    """(node, node's GPU id) of every worker hpcgpu's step would start, from the captured tasks."""
    argv = argv_of(shape)
    worker = argv[argv.index("hpcgpu.worker"):]
    gpus = worker[worker.index("--gpus-per-node") + 1] if "--gpus-per-node" in worker else None
    places = []
    for env in steps_of(shape):
        found = ([placement_from_env(None, env)] if gpus is None else
                 node_placements(None, gpus if gpus == "all" else int(gpus), env))
        places += [(env["SLURM_NODEID"], physical_gpu(p.gpu, env)) for p in found]
    return places


@pytest.mark.parametrize("shape", SAME_STEP)
def test_every_worker_has_its_own_gpu(shape):
    places = places_in_step(shape)
    assert len(places) == SHAPES[shape] and len(set(places)) == len(places), places


def test_mpirun_in_a_per_task_allocation_is_refused_not_shared():
    # mpirun's daemon on each node inherits --gpus-per-task=1: both ranks see GPU 0
    ranks = []
    for rank, env in enumerate(steps_of("n2gpt1")[:2]):
        env = dict(env, CUDA_VISIBLE_DEVICES="0", SLURM_STEP_GPUS="0")
        key = (0, physical_gpu(placement_from_env(None, env).gpu, env))
        ranks.append((rank, key, None))
    assert "ranks 0 and 1 would share GPU 0 of node 0" in shared_gpu_error(ranks)


def test_more_ranks_than_gpus_on_a_node_is_refused():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "5",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    with pytest.raises(ValueError, match="8 workers on this node but .* lists 4 GPU"):
        placement_from_env(None, env)
    # rank 0 of the same node is refused too, so that every rank stops
    with pytest.raises(ValueError, match="two workers would share a GPU"):
        placement_from_env(None, dict(env, OMPI_COMM_WORLD_LOCAL_RANK="0"))


def test_hpcgpu_run_under_srun_is_detected():
    task = env_of("gpt1.step.1.env")
    assert started_per_task(task).startswith("hpcgpu run is task 1 of 2 started by srun")
    assert started_per_task(env_of("gpt1.batch.env")) is None


@given(st.lists(st.tuples(st.integers(1, 256), st.integers(1, 9)), min_size=1, max_size=5))
def test_job_cpus_per_node_smallest_node(groups):
    text = ",".join(f"{c}(x{k})" if k > 1 else str(c) for c, k in groups)
    assert _min_cpus(text) == min(c for c, _ in groups)


def test_mpirun_gives_its_daemons_the_nodes_gpus():
    # captured: under --gpus-per-task=1 each node's orted (an srun task) sees one GPU;
    # with OMPI_MCA_plm_slurm_args=--gpus-per-node=2 it sees both (tests/integration/test_batch_slurm.py)
    allocation = detect_allocation(env_of("n2gpt1.batch.env"), probe_gpus=lambda: None)
    env = launcher_environment(allocation, get_launcher("mpirun"),
                               dict(env_of("n2gpt1.batch.env"), OMPI_MCA_plm_slurm_args="-v"))
    assert env["OMPI_MCA_plm_slurm_args"] == "-v --gpus-per-node=2"
    uneven = dataclasses.replace(allocation, tasks=3)
    with pytest.raises(ValueError, match="use --launcher srun"):
        launcher_environment(uneven, get_launcher("mpirun"), {})


def test_ranks_without_cuda_visible_devices_count_the_nodes_gpus(monkeypatch):
    """mpirun outside a batch job sets no CUDA_VISIBLE_DEVICES: 4 local ranks on a node whose
    nvidia-smi lists 2 GPUs are refused (found on a lent 2 x H200: ranks 2 and 3 took GPUs
    that do not exist, and the run hung); 2 ranks take GPUs 0 and 1."""
    import hpcgpu.worker.placement as placement

    monkeypatch.setattr(placement, "_node_gpu_count", lambda: 2)
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    with pytest.raises(ValueError, match=r"4 workers on this node but nvidia-smi -L lists 2 GPU\(s\)"):
        placement_from_env(None, env)
    pair = [placement_from_env(None, {**env, "OMPI_COMM_WORLD_LOCAL_RANK": str(r),
                                      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}).gpu for r in (0, 1)]
    assert pair == ["0", "1"]
    monkeypatch.setattr(placement, "_node_gpu_count", lambda: None)  # no NVIDIA driver here
    assert placement_from_env(None, env).gpu == "3"
