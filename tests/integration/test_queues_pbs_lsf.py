"""PBS Pro and LSF: the job shape checked against what the queue's nodes offer, before
qsub/bsub. The fixtures (tests/data/pbs-*, lsf-*) are written from the documented output
formats (their first line says so); PBS's queries are also answered by the real OpenPBS
23.06.06 (and its captured answers, tests/data/openpbs-*), LSF's by the shims
(tests/shims/lsf) from the local SLURM.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest

from cluster_helpers import SHIMS, recorded_commands
from hpcgpu.system import commands
from hpcgpu.system.commands import CommandResult
from hpcgpu.jobspec.dialects.lsf import LSFDialect
from hpcgpu.jobspec.dialects.pbs import PBSDialect
from hpcgpu.jobspec.queues import QueueCheckWarning, check_queue, queue_offer
from hpcgpu.jobspec.queues.lsf import parse_bqueues, parse_lshosts, parse_lshosts_gpu
from hpcgpu.jobspec.queues.pbs import parse_pbsnodes, parse_queue
from hpcgpu.jobspec.resources import GPUJobShape

DATA = Path(__file__).parents[1] / "data"


def fixture(name: str) -> str:
    """A fixture without its header line (where its format comes from)."""
    lines = (DATA / name).read_text().splitlines(keepends=True)
    assert lines[0].startswith("# DERIVED, not captured:"), name
    return "".join(lines[1:])


PBS = {("pbsnodes", "-av", "-F", "json"): "pbs-pbsnodes-av-F-json.txt",
       ("qstat", "-Qf", "-F", "json", "gpuq"): "pbs-qstat-Qf-F-json.txt"}
LSF = {("bqueues", "-l", "gpu"): "lsf-bqueues-l-gpu.txt",
       ("lshosts", "-w", "gpu01", "gpu02"): "lsf-lshosts-w.txt",
       ("lshosts", "-gpu", "gpu01", "gpu02"): "lsf-lshosts-gpu.txt",
       ("lshosts", "-w"): "lsf-lshosts-w.txt", ("lshosts", "-gpu"): "lsf-lshosts-gpu.txt"}
UNKNOWN = {"qstat": (170, "qstat: Unknown queue nosuch"), "bqueues": (255, "nosuch: No such queue")}


@pytest.fixture
def answers():
    def run(argv, timeout, input):
        name = {**PBS, **LSF}.get(tuple(argv))
        if name:
            return CommandResult(tuple(argv), 0, fixture(name), "")
        code, said = UNKNOWN.get(argv[0], (127, f"{argv[0]}: command not found"))
        return CommandResult(tuple(argv), code, "", said)
    commands.set_runner(run)
    yield
    commands.set_runner(None)


def test_the_documented_pbs_answers_parse():
    text = fixture("pbs-pbsnodes-av-F-json.txt")
    assert [(n.name, n.cpus, n.memory // 2**30, n.gpus) for n in parse_pbsnodes(text, "gpuq")] == [
        ("g1", 64, 503, (("a100", 4),)), ("g2", 64, 503, (("a100", 4),))]
    assert [n.name for n in parse_pbsnodes(text, "workq")] == ["c1"]  # no associated vnodes
    assert len(parse_pbsnodes(text)) == 3
    queue = parse_queue(fixture("pbs-qstat-Qf-F-json.txt"), "gpuq")
    assert queue["resources_max"] == {"mem": "600gb", "ngpus": 6, "nodect": 2, "walltime": "24:00:00"}


def test_the_documented_lsf_answers_parse():
    assert parse_bqueues(fixture("lsf-bqueues-l-gpu.txt")) == {
        "status": "Open:Active", "hosts": ["gpu01", "gpu02"], "max_tasks": 12}
    assert parse_lshosts(fixture("lsf-lshosts-w.txt")) == {
        "gpu01": (40, int(376.2 * 2**30)), "gpu02": (40, int(376.2 * 2**30))}
    assert parse_lshosts_gpu(fixture("lsf-lshosts-gpu.txt")) == {
        "gpu01": (("TeslaV100_SXM2_32GB", 4),), "gpu02": (("TeslaV100_SXM2_32GB", 2),)}


REFUSED = [
    ("pbs", dict(gpus_per_node=8, queue="gpuq"), "gpus_per_node=8 is more than the 4 GPUs a node "
     "of queue 'gpuq' has (ngpus=4 on g1, g2): use gpus_per_node<=4 and more nodes"),
    ("pbs", dict(gpus_per_node=2, gpu_type="h100", queue="gpuq"),
     "gpu_type='h100': the nodes of queue 'gpuq' have GPUs of type a100: use gpu_type='a100'"),
    ("pbs", dict(gpus_per_node=4, cpus_per_gpu=32, queue="gpuq"),
     "= 128 CPUs is more than the 64 a node of queue 'gpuq' has: use cpus_per_gpu<=16"),
    ("pbs", dict(gpus_per_node=4, memory_per_gpu="200GiB", queue="gpuq"),
     "memory per node (800 GiB) is more than the 503 GiB a node of queue 'gpuq' has"),
    ("pbs", dict(nodes=3, gpus_per_node=1, queue="gpuq"), "nodes=3 is more than the 2 node(s)"),
    ("pbs", dict(nodes=2, gpus_per_node=4, queue="gpuq"), "nodes=2 x gpus_per_node=4 = 8 GPUs is "
     "more than the 6 queue 'gpuq' allows a job: use at most 6 GPUs per job"),
    ("pbs", dict(nodes=2, gpus_per_node=2, memory_per_gpu="200GiB", queue="gpuq"),
     "memory of the job (800 GiB) is more than the 600 GiB queue 'gpuq' allows a job"),
    ("pbs", dict(gpus_per_node=1, queue="nosuch"), "queue='nosuch' is not a queue of this PBS"),
    ("pbs", dict(gpus_per_node=8), "a node of any queue has (ngpus=4 on g1, g2)"),
    ("lsf", dict(gpus_per_node=8, queue="gpu"), "gpus_per_node=8 is more than the 4 GPUs a host "
     "of queue 'gpu' has (4 x TeslaV100_SXM2_32GB on gpu01): use gpus_per_node<=4"),
    ("lsf", dict(gpus_per_node=1, gpu_type="a100", queue="gpu"), "gpu_type='a100': the hosts of "
     "queue 'gpu' have GPUs of type TeslaV100_SXM2_32GB"),
    ("lsf", dict(nodes=2, gpus_per_node=4, queue="gpu"), "nodes=2 is more than the 1 host(s)"),
    ("lsf", dict(gpus_per_node=4, cpus_per_gpu=11, queue="gpu"), "= 44 CPUs is more than the 40"),
    ("lsf", dict(nodes=2, gpus_per_node=2, gpu_type="TeslaV100", queue="gpu"), None),
    ("lsf", dict(gpus_per_node=2, memory_per_gpu="200GiB", queue="gpu"),
     "memory per node (400 GiB) is more than the 376 GiB a host of queue 'gpu' has"),
    ("lsf", dict(gpus_per_node=1, queue="nosuch"), "queue='nosuch' is not an LSF queue"),
]
ACCEPTED = [
    ("pbs", dict(nodes=2, gpus_per_node=3, cpus_per_gpu=16, memory_per_gpu="100GiB", queue="gpuq",
                 gpu_type="a100")),
    ("pbs", dict(gpus_per_node=4)),
    ("lsf", dict(gpus_per_node=4, cpus_per_gpu=10, memory_per_gpu="90GiB", queue="gpu",
                 gpu_type="TeslaV100")),
    ("lsf", dict(nodes=2, gpus_per_node=2, queue="gpu")),
    ("lsf", dict(gpus_per_node=4)),
]
DIALECTS = {"pbs": PBSDialect(), "lsf": LSFDialect()}


@pytest.mark.parametrize("scheduler, options, words",
                         [case for case in REFUSED if case[2]])
def test_refused_on_the_documented_answers(answers, scheduler, options, words):
    with pytest.raises(ValueError) as refused:
        check_queue(scheduler, GPUJobShape.create(**options), DIALECTS[scheduler])
    assert words in str(refused.value)


@pytest.mark.parametrize("scheduler, options", ACCEPTED + [c[:2] for c in REFUSED if not c[2]])
def test_accepted_on_the_documented_answers(answers, scheduler, options):
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueueCheckWarning)
        check_queue(scheduler, GPUJobShape.create(**options), DIALECTS[scheduler])


def test_lsf_queue_task_limit(answers):
    """bqueues' TASKLIMIT (its last number: the most tasks, one per GPU, of a job)."""
    real = commands.runner
    limited = fixture("lsf-bqueues-l-gpu.txt").replace(" 1     8     12", " 1     2     3")
    commands.set_runner(lambda argv, timeout, input: CommandResult(tuple(argv), 0, limited, "")
                        if argv[0] == "bqueues" else real(argv, timeout, input))
    with pytest.raises(ValueError, match="nodes=2 x gpus_per_node=2 = 4 GPUs is more than the 3 "
                                         "queue 'gpu' allows a job"):
        check_queue("lsf", GPUJobShape.create(nodes=2, gpus_per_node=2, queue="gpu"), LSFDialect())


@pytest.mark.parametrize("scheduler", ["pbs", "lsf"])
def test_no_command_warns_once_and_lets_the_job_go(scheduler, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    shape = GPUJobShape.create(gpus_per_node=64, queue=f"{scheduler}-missing")
    with pytest.warns(QueueCheckWarning, match=f"could not ask {scheduler} .*command not found"):
        check_queue(scheduler, shape, DIALECTS[scheduler])
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueueCheckWarning)
        assert queue_offer(scheduler, shape, DIALECTS[scheduler]) is None


@pytest.mark.parametrize("scheduler", ["lsf"])
@pytest.mark.parametrize("options, words", [
    (dict(gpus_per_node=8), "gpus_per_node=8 is more than the 4 GPUs"),
    (dict(gpus_per_node=1, gpu_type="a100", queue="gpu"), "gpu_type='a100': the"),
    (dict(gpus_per_node=1, queue="nosuch"), "queue='nosuch' is not"),
    (dict(nodes=5, gpus_per_node=1, queue="debug", launcher="mpiexec"), "nodes=5 is more than"),
])
def test_the_shims_answer_and_nothing_is_submitted(slurm, monkeypatch, tmp_path, scheduler,
                                                   options, words):
    from hpcgpu import LSFCluster

    monkeypatch.setenv("PATH", f"{SHIMS / scheduler}{os.pathsep}{os.environ['PATH']}")
    with recorded_commands() as seen, pytest.raises(ValueError, match=words):
        LSFCluster(**{"launcher": "direct", **options}, log_directory=str(tmp_path))
    assert not {argv[0] for argv in seen} & {"qsub", "bsub", "sh"}, seen
    assert seen  # asked the (shim) scheduler


@pytest.mark.pbs
@pytest.mark.parametrize("options, words", [
    (dict(gpus_per_node=8), "gpus_per_node=8 is more than the 4 GPUs a node of any queue has "
     "(ngpus=4 on pbsnode1, pbsnode2)"),
    (dict(gpus_per_node=1, gpu_type="a100"), "gpu_type='a100': the nodes of any queue do not "
     "say their GPU type"),
    (dict(gpus_per_node=1, queue="nosuch"), "queue='nosuch' is not a queue of this PBS server"),
    (dict(nodes=5, gpus_per_node=1, launcher="mpiexec"), "nodes=5 is more than the 2 node(s)"),
])
def test_the_real_pbs_answers_and_nothing_is_submitted(pbs, tmp_path, options, words):
    from hpcgpu import PBSCluster

    with recorded_commands() as seen, pytest.raises(ValueError, match=re.escape(words)):
        PBSCluster(**options, log_directory=str(tmp_path))
    assert "qsub" not in {argv[0] for argv in seen} and seen, seen  # asked, submitted nothing


@pytest.mark.pbs
def test_the_real_pbs_accepts_what_fits(pbs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueueCheckWarning)
        check_queue("pbs", GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=2,
                                              memory_per_gpu="4GiB", queue="workq"), PBSDialect())


def test_the_real_pbs_answers_parse():
    """``pbsnodes -av -F json`` and ``qstat -Qf -F json workq`` of OpenPBS 23.06.06 (the
    natural vnode of the mom has nothing; the jobs go to pbsnode1, pbsnode2)."""
    nodes = parse_pbsnodes((DATA / "openpbs-23.06.06-pbsnodes-av-F-json.json").read_text())
    assert [(n.name, n.cpus, n.memory // 2**30, n.gpus) for n in nodes if n.cpus] == [
        ("pbsnode1", 8, 16, (("", 4),)), ("pbsnode2", 8, 16, (("", 4),))]
    queue = parse_queue((DATA / "openpbs-23.06.06-qstat-Qf-F-json-workq.json").read_text(), "workq")
    assert queue["queue_type"] == "Execution" and queue["enabled"] == "True"


@pytest.mark.parametrize("scheduler", ["lsf"])
def test_the_shims_accept_what_fits(slurm, monkeypatch, scheduler):
    monkeypatch.setenv("PATH", f"{SHIMS / scheduler}{os.pathsep}{os.environ['PATH']}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueueCheckWarning)
        check_queue(scheduler, GPUJobShape.create(nodes=4, gpus_per_node=4, cpus_per_gpu=8,
                                                  memory_per_gpu="64GiB", gpu_type="h100",
                                                  queue="gpu"), DIALECTS[scheduler])
