"""Grid Engine: the job shape checked against what the queue's hosts offer, before qsub.

On the real local SGE 8.1.9 (queue all.q on one host 'vm': 8 slots, complex_values gpu=4,
PEs smp and mpi) and on its captured qconf answers (tests/data/sge-8.1.9-*.txt), plus a
derived queue with a host group and per-host slots.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cluster_helpers import recorded_commands
from hpcgpu import SGECluster
from hpcgpu.system import commands
from hpcgpu.system.commands import CommandResult
from hpcgpu.jobspec.dialects.sge import SGEDialect
from hpcgpu.jobspec.queues import QueueCheckWarning, check_queue, queue_offer
from hpcgpu.jobspec.queues.offer import PartitionNode, QueueOffer, shape_problem
from hpcgpu.jobspec.queues.sge import MAX_HOSTS_ASKED, parse_qconf, queue_values, sge_host, sge_offer
from hpcgpu.jobspec.resources import GPUJobShape

DATA = Path(__file__).parents[1] / "data"
CAPTURED = {
    ("-spl",): "sge-8.1.9-qconf-spl.txt", ("-sel",): "sge-8.1.9-qconf-sel.txt",
    ("-sq", "all.q"): "sge-8.1.9-qconf-sq-all.q.txt", ("-se", "vm"): "sge-8.1.9-qconf-se-vm.txt",
    ("-sql",): None,
}


def answers(table: dict[tuple, str | None]):
    """A command runner that answers qconf from ``table`` (argv[1:] -> text)."""
    def run(argv, timeout, input):
        key = tuple(argv[1:])
        if argv[0] != "qconf" or key not in table:
            return CommandResult(tuple(argv), 1, "", f"No cluster queue or queue instance "
                                 f"matches the phrase \"{argv[-1]}\"")
        text = table[key]
        text = "all.q\n" if text is None else (DATA / text).read_text() if text.endswith(".txt") else text
        return CommandResult(tuple(argv), 0, text, "")
    return run


@pytest.fixture
def captured():
    commands.set_runner(answers(CAPTURED))
    yield
    commands.set_runner(None)


def test_the_captured_answers_parse():
    host = sge_host((DATA / "sge-8.1.9-qconf-se-vm.txt").read_text())
    assert (host.name, host.gpu_count) == ("vm", 4) and 20 * 2**30 < host.memory < 30 * 2**30
    queue = parse_qconf((DATA / "sge-8.1.9-qconf-sq-all.q.txt").read_text())
    assert (queue["hostlist"], queue["slots"], queue["pe_list"]) == ("vm", "8", "smp mpi")


REFUSED = [
    (dict(gpus_per_node=8, queue="all.q"), {}, "gpus_per_node=8 is more than the 4 GPUs a host "
     "of queue 'all.q' has (gpu=4 on vm): use gpus_per_node<=4 and more nodes, or another queue"),
    (dict(gpus_per_node=8), {}, "a host of any queue has (gpu=4 on vm)"),
    (dict(gpus_per_node=1, queue="nosuch"), {}, "queue='nosuch' is not a Grid Engine cluster "
     "queue (qconf -sql lists them)"),
    (dict(gpus_per_node=1), dict(parallel_environment="nope"), "parallel_environment='nope' does "
     "not exist on this Grid Engine (qconf -spl: mpi, smp): set parallel_environment to one"),
    (dict(nodes=2, gpus_per_node=2, queue="all.q"), dict(multi_node_parallel_environment="mpi"),
     "nodes=2 is more than the 1 host(s) of queue 'all.q' that have 2 GPU(s)"),
    (dict(gpus_per_node=4, memory_per_gpu="100GiB", queue="all.q"), {},
     "memory per node (400 GiB) is more than the 24 GiB a host of queue 'all.q' has"),
]
ACCEPTED = [
    (dict(gpus_per_node=4, queue="all.q"), {}),
    (dict(gpus_per_node=2, memory_per_gpu="4GiB"), {}),
    (dict(gpus_per_node=1, queue="all.q", gpu_type="h100"), {}),  # SGE is not asked a type
    (dict(gpus_per_node=2), dict(parallel_environment="mpi")),
]


@pytest.mark.parametrize("options, site, words", REFUSED)
def test_refused_on_the_captured_answers(captured, options, site, words):
    shape = GPUJobShape.create(**options)
    assert words in shape_problem(shape, sge_offer(shape, SGEDialect(**site)))


@pytest.mark.parametrize("options, site", ACCEPTED)
def test_accepted_on_the_captured_answers(captured, options, site):
    shape = GPUJobShape.create(**options)
    assert shape_problem(shape, sge_offer(shape, SGEDialect(**site))) is None


@pytest.mark.sge
@pytest.mark.parametrize("options, site, words", REFUSED)
def test_refused_by_the_real_sge(sge, options, site, words):
    with pytest.raises(ValueError) as refused:
        check_queue("sge", GPUJobShape.create(**options), SGEDialect(**site))
    assert words in str(refused.value)


@pytest.mark.sge
@pytest.mark.parametrize("options, site", ACCEPTED)
def test_accepted_by_the_real_sge(sge, options, site):
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueueCheckWarning)
        check_queue("sge", GPUJobShape.create(**options), SGEDialect(**site))


def test_a_host_group_and_per_host_slots_and_queue_gpus():
    table = {("-spl",): "smp\n", ("-shgrp_resolved", "@gpu"): "g1 g2\n",
             ("-sq", "gpu.q"): "qname gpu.q\nhostlist @gpu\npe_list smp\n"
                               "slots 16,[g2=2]\ncomplex_values gpu=8,[g1=gpu=2]\nh_vmem 8G\n",
             ("-se", "g1"): "hostname g1\ncomplex_values gpu=4\nload_values mem_total=512G\n",
             ("-se", "g2"): "hostname g2\ncomplex_values gpu=8,h_vmem=256G\n"}
    commands.set_runner(answers(table))
    try:
        offer = sge_offer(GPUJobShape.create(queue="gpu.q"), SGEDialect())
    finally:
        commands.set_runner(None)
    assert [(n.name, n.gpu_count, n.slots, n.memory // 2**30) for n in offer.nodes] == [
        ("g1", 2, 16, 512), ("g2", 8, 2, 256)]
    # g1 has 2 GPUs (the queue's cap), g2 has 8 GPUs but 2 slots: no host takes 4 GPUs
    assert "nodes=1 is more than the 0 host(s) of queue 'gpu.q' that have 4 GPU(s)" in (
        shape_problem(GPUJobShape.create(gpus_per_node=4, queue="gpu.q"), offer))
    assert "memory_per_gpu=16 GiB is more than the h_vmem=8 GiB queue 'gpu.q' allows a slot" in (
        shape_problem(GPUJobShape.create(gpus_per_node=1, memory_per_gpu="16GiB", queue="gpu.q"),
                      offer))
    small = QueueOffer("queue", "gpu.q", (PartitionNode("g2", 0, 0, (("", 8),), 2),))
    assert "gpus_per_node=4 needs 4 slots (one per GPU) but queue 'gpu.q' has at most 2 on a " \
           "node: use gpus_per_node<=2" in shape_problem(GPUJobShape.create(gpus_per_node=4), small)
    assert queue_values("NONE") == ("NONE", {})


def test_a_restricted_qconf_warns_once_and_lets_the_job_go():
    denied = "denied: host \"login1\" is neither submit nor admin host"
    commands.set_runner(lambda argv, timeout, input: CommandResult(tuple(argv), 1, "", denied))
    try:
        with pytest.warns(QueueCheckWarning, match="could not ask sge what the nodes of queue "
                          "'warn.q' offer .*neither submit nor admin host.*submitted unchecked"):
            check_queue("sge", GPUJobShape.create(gpus_per_node=64, queue="warn.q"), SGEDialect())
        with warnings.catch_warnings():
            warnings.simplefilter("error", QueueCheckWarning)  # once
            assert queue_offer("sge", GPUJobShape.create(queue="warn.q"), SGEDialect()) is None
    finally:
        commands.set_runner(None)


@pytest.mark.sge
def test_the_cluster_refuses_before_submitting(sge, tmp_path):
    with recorded_commands() as seen, pytest.raises(ValueError, match="gpus_per_node=6 is more "
                                                    "than the 4 GPUs a host of queue 'all.q'"):
        SGECluster(gpus_per_node=6, queue="all.q", log_directory=str(tmp_path))
    assert {argv[0] for argv in seen} == {"qconf"}


@pytest.mark.sge
def test_the_real_qsub_agrees(sge, tmp_path):
    """What the check refuses for GPUs, SGE refuses too (with a message that names no field)."""
    argv = [sys.executable, "-m", "hpcgpu", "jobscript", "sge", "--gpus-per-node", "8", "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and "REFUSED: gpus_per_node=8 is more than the 4 GPUs" in done.stderr
    script = tmp_path / "eight.sh"
    script.write_text(done.stdout)
    verify = subprocess.run(["qsub", "-w", "v", str(script)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert verify.returncode != 0 and "no suitable queues" in verify.stdout + verify.stderr
    argv[6] = "4"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and "accepted by sge" in done.stderr, done.stderr


def test_a_large_queue_gets_the_queue_checks_without_a_qconf_per_host():
    hosts = [f"n{i:03d}" for i in range(MAX_HOSTS_ASKED + 1)]
    table = {("-spl",): "smp\n",
             ("-sq", "big.q"): f"qname big.q\nhostlist {' '.join(hosts)}\npe_list smp\nslots 8\n"}
    asked: list[list[str]] = []
    answer = answers(table)
    commands.set_runner(lambda argv, timeout, input: asked.append(argv) or answer(argv, timeout, input))
    try:
        offer = sge_offer(GPUJobShape.create(gpus_per_node=64, queue="big.q"), SGEDialect())
    finally:
        commands.set_runner(None)
    assert offer.nodes == () and shape_problem(GPUJobShape.create(gpus_per_node=64, queue="big.q"),
                                                offer) is None
    assert not any(argv[1] == "-se" for argv in asked), asked
    assert ["qconf", "-sq", "big.q"] in asked  # the queue itself is still asked
