"""A wrong queue or partition is refused by the constructor, before anything is submitted,
naming the queues that exist and can run the job's shape (#43 item 3).

Real local SLURM 22.05 (partitions debug*, gpu and hidden (Hidden=YES: root sees it in sinfo, other users only by its name): 4 nodes x 4 h100) and Grid Engine 8.1.9
(queue all.q: host vm, gpu=4); PBS on the captured answers of the real OpenPBS 23.06.06
(tests/data/openpbs-23.06.06-*: queue workq, vnodes pbsnode1-2 with ngpus=4, 8 CPUs, 16gb)
and the real OpenPBS; LSF on fixtures written from its documented output (no LSF here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_helpers import recorded_commands
from hpcgpu import SGECluster, SLURMCluster
from hpcgpu.jobspec.dialects.pbs import PBSDialect
from hpcgpu.jobspec.queues import check_queue
from hpcgpu.jobspec.queues.listing import fitting_queues
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.system import commands
from hpcgpu.system.commands import CommandResult

DATA = Path(__file__).parents[1] / "data"
SINFO = (DATA / "sinfo-node.txt").read_text()
OPENPBS = {("qstat", "-Qf", "-F", "json"): "openpbs-23.06.06-qstat-Qf-F-json-workq.json",
           ("qstat", "-Qf", "-F", "json", "workq"): "openpbs-23.06.06-qstat-Qf-F-json-workq.json",
           ("pbsnodes", "-av", "-F", "json"): "openpbs-23.06.06-pbsnodes-av-F-json.json"}


def answering(table: dict, unknown: tuple[int, str]):
    """A command runner answering argv from ``table`` (argv -> text or file), else ``unknown``."""
    def run(argv, timeout, input):
        found = table.get(tuple(argv))
        if found is None:
            return CommandResult(tuple(argv), unknown[0], "", unknown[1])
        text = (DATA / found).read_text() if found.endswith((".json", ".txt")) else found
        return CommandResult(tuple(argv), 0, text, "")
    return run


@pytest.fixture
def captured_slurm():
    argv = ("sinfo", "--noheader", "--Node", "--format=%N|%c|%m|%G|%P")
    commands.set_runner(answering({argv: SINFO}, (1, "sinfo: error")))
    yield
    commands.set_runner(None)


@pytest.fixture
def captured_pbs():
    commands.set_runner(answering(OPENPBS, (170, "qstat: Unknown queue nosuch")))
    yield
    commands.set_runner(None)


def test_slurm_lists_the_partitions_that_fit(captured_slurm):
    assert fitting_queues("slurm", GPUJobShape.create(gpus_per_node=4)) == ["debug", "gpu"]
    assert fitting_queues("slurm", GPUJobShape.create(nodes=5)) == []
    with pytest.raises(ValueError) as refused:
        check_queue("slurm", GPUJobShape.create(gpus_per_node=2, queue="gpuz"))
    assert str(refused.value) == (
        "queue='gpuz' is not a partition of this SLURM cluster (sinfo lists them); "
        "partitions that exist and can run this job: debug, gpu")


def test_pbs_lists_the_queues_that_fit_from_real_answers(captured_pbs):
    dialect = PBSDialect()
    assert fitting_queues("pbs", GPUJobShape.create(gpus_per_node=4), dialect) == ["workq"]
    assert fitting_queues("pbs", GPUJobShape.create(gpus_per_node=4, memory_per_gpu="8GiB"),
                          dialect) == []  # 32 GiB a node: the vnodes have 16gb
    with pytest.raises(ValueError) as refused:
        check_queue("pbs", GPUJobShape.create(gpus_per_node=2, queue="nosuch"), dialect)
    assert "queue='nosuch' is not a queue of this PBS server" in str(refused.value)
    assert str(refused.value).endswith("; queues that exist and can run this job: workq")
    with pytest.raises(ValueError, match="GPUs a node of queue 'workq' has .*; no queue here "
                                         "can run this job as asked"):
        check_queue("pbs", GPUJobShape.create(gpus_per_node=8, queue="workq"), dialect)


def derived(name: str) -> str:
    """A fixture written from a documented format, without its first line (which says so)."""
    return (DATA / name).read_text().split("\n", 1)[1]


def test_lsf_lists_its_open_queues_that_fit_on_documented_answers():
    gpu = derived("lsf-bqueues-l-gpu.txt")
    normal = gpu.replace("QUEUE: gpu", "QUEUE: normal").replace(" 1     8     12", " 1     1     2")
    table = {("bqueues", "-w"): derived("lsf-bqueues-w.txt"), ("bqueues", "-l", "gpu"): gpu,
             ("bqueues", "-l", "normal"): normal,
             ("lshosts", "-w", "gpu01", "gpu02"): derived("lsf-lshosts-w.txt"),
             ("lshosts", "-gpu", "gpu01", "gpu02"): derived("lsf-lshosts-gpu.txt")}
    commands.set_runner(answering(table, (255, "nosuch: No such queue")))
    try:
        assert fitting_queues("lsf", GPUJobShape.create(gpus_per_node=2)) == ["gpu", "normal"]
        with pytest.raises(ValueError) as refused:  # normal: at most 2 tasks (GPUs) a job
            check_queue("lsf", GPUJobShape.create(gpus_per_node=4, queue="nosuch"))
    finally:
        commands.set_runner(None)
    assert str(refused.value) == ("queue='nosuch' is not an LSF queue (bqueues lists them): use "
                                  "one of those; queues that exist and can run this job: gpu")


def test_a_scheduler_that_cannot_list_adds_nothing():
    commands.set_runner(lambda argv, timeout, input: CommandResult(tuple(argv), 127, "", "nope"))
    try:
        assert fitting_queues("slurm", GPUJobShape.create()) is None
        assert fitting_queues("pbs", GPUJobShape.create()) is None
        assert fitting_queues("lsf", GPUJobShape.create()) is None
        assert fitting_queues("flux", GPUJobShape.create()) is None
    finally:
        commands.set_runner(None)


def test_the_real_slurm_refuses_an_unknown_partition_in_the_constructor(slurm, tmp_path):
    with recorded_commands() as seen, pytest.raises(ValueError) as refused:
        SLURMCluster(gpus_per_node=2, queue="gpuz", log_directory=str(tmp_path))
    assert str(refused.value) == (
        "queue='gpuz' is not a partition of this SLURM cluster (sinfo lists them); "
        "partitions that exist and can run this job: debug, gpu, hidden")
    assert {argv[0] for argv in seen} == {"sinfo"}  # nothing submitted


def test_the_real_slurm_refuses_an_unknown_partition_for_cpu_jobs_too(slurm, tmp_path):
    words = ("queue='nope' is not a partition of this SLURM cluster (sinfo lists them); "
             "partitions that exist and can run this job: debug, gpu, hidden")
    with recorded_commands() as seen:
        with pytest.raises(ValueError) as refused:  # dask-jobqueue's CPU job
            SLURMCluster(cores=2, memory="2GB", queue="nope", log_directory=str(tmp_path))
        assert str(refused.value) == words
        pool = dict(gpus_per_node=0, cores_per_node=2, memory_per_node="2GB", queue="nope")
        with pytest.raises(ValueError) as refused:
            SLURMCluster(gpus_per_node=1, pools={"cpu": pool}, log_directory=str(tmp_path))
        assert str(refused.value) == f"pools['cpu']: {words}"
    assert {argv[0] for argv in seen} == {"sinfo"}


def test_a_hidden_partition_is_taken_where_sinfo_lists_it_by_name(slurm, tmp_path):
    """A partition configured ``Hidden=YES`` (the test SLURM's ``hidden``) is left out of
    sinfo's listing for users other than root, and listed when named (``--partition``):
    sbatch takes jobs there, so the constructor does too, checked against its nodes. The
    scheduler commands run as ``nobody`` through hpcgpu's one subprocess seam; before,
    ``queue='hidden'`` was refused as 'not a partition'."""
    real = commands.runner

    def as_nobody(argv, timeout, input):
        return real(["runuser", "-u", "nobody", "--", *argv] if argv[0] == "sinfo" else argv, timeout, input)

    listed = subprocess.run(["runuser", "-u", "nobody", "--", "sinfo", "--noheader", "--format=%P"],
                            capture_output=True, text=True, timeout=30).stdout.split()
    assert "hidden" not in listed and "gpu" in listed, listed  # what makes the case
    commands.set_runner(as_nobody)
    try:
        cluster = SLURMCluster(gpus_per_node=2, queue="hidden", log_directory=str(tmp_path))
        assert "#SBATCH --partition=hidden" in cluster.job_script()
        cluster.close()
        SLURMCluster(cores=2, memory="2GB", queue="hidden", log_directory=str(tmp_path)).close()
        with pytest.raises(ValueError, match="use nodes<=4; no partition here can run this job"):
            SLURMCluster(nodes=5, gpus_per_node=1, queue="hidden", log_directory=str(tmp_path))
        with pytest.raises(ValueError, match=r"^queue='gpuz' is not a partition of this SLURM cluster"):
            SLURMCluster(gpus_per_node=2, queue="gpuz", log_directory=str(tmp_path))
    finally:
        commands.set_runner(None)


def test_the_real_slurm_names_no_partition_where_none_fits(slurm, tmp_path):
    with pytest.raises(ValueError, match="use nodes<=4; no partition here can run this job"):
        SLURMCluster(nodes=5, gpus_per_node=1, queue="gpu", log_directory=str(tmp_path))


@pytest.mark.sge
def test_the_real_sge_refuses_an_unknown_queue_listing_those_that_fit(sge, tmp_path):
    with recorded_commands() as seen, pytest.raises(ValueError) as refused:
        SGECluster(gpus_per_node=2, queue="gpu.q", log_directory=str(tmp_path))
    assert str(refused.value) == (
        "queue='gpu.q' is not a Grid Engine cluster queue (qconf -sql lists them); "
        "queues that exist and can run this job: all.q")
    assert {argv[0] for argv in seen} == {"qconf"}
    with pytest.raises(ValueError, match="; no queue here can run this job as asked"):
        check_queue("sge", GPUJobShape.create(gpus_per_node=6, queue="all.q"))


@pytest.mark.pbs
def test_the_real_pbs_refuses_an_unknown_queue_listing_those_that_fit(pbs, tmp_path):
    from hpcgpu import PBSCluster

    with recorded_commands() as seen, pytest.raises(ValueError) as refused:
        PBSCluster(gpus_per_node=2, queue="gpuq", log_directory=str(tmp_path))
    assert str(refused.value).startswith("queue='gpuq' is not a queue of this PBS server")
    assert str(refused.value).endswith("; queues that exist and can run this job: workq")
    assert "qsub" not in {argv[0] for argv in seen}


def test_jobscript_check_names_the_partitions(slurm):
    argv = [sys.executable, "-m", "hpcgpu", "jobscript", "slurm", "--queue", "gpuz", "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "REFUSED: queue='gpuz' is not a partition" in done.stderr
    assert "partitions that exist and can run this job: debug, gpu, hidden" in done.stderr


def _users_config(tmp_path, values: dict) -> dict:
    """``values`` as a file of the user's dask config (DASK_CONFIG's directory), read back
    the way dask reads ``~/.config/dask/*.yaml``."""
    import dask.config
    import yaml

    directory = tmp_path / "dask"
    directory.mkdir()
    (directory / "hpcgpu.yaml").write_text(yaml.safe_dump(values))
    return dask.config.collect(paths=[str(directory)], env={})


def test_the_real_slurm_says_a_refused_partition_came_from_the_profile(slurm, tmp_path):
    """#43 item 5: the partition check ran after the config's values were named, so a queue
    from ``hpcgpu.profiles.<name>`` was refused without saying where it came from."""
    import dask.config

    users = _users_config(tmp_path, {"hpcgpu": {"profiles": {"mysite": {"queue": "gpuz"}}}})
    with dask.config.set(users), pytest.raises(ValueError) as refused:
        SLURMCluster(profile="mysite", gpus_per_node=2, log_directory=str(tmp_path))
    assert str(refused.value) == (
        "queue='gpuz' is not a partition of this SLURM cluster (sinfo lists them); "
        "partitions that exist and can run this job: debug, gpu, hidden (the value comes from "
        "profile 'mysite' (hpcgpu.profiles.mysite.queue) of your dask config: "
        "~/.config/dask/*.yaml or DASK_* variables)")
    argv = [sys.executable, "-m", "hpcgpu", "jobscript", "slurm", "--profile", "mysite", "--check"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("DASK_")},
                               "DASK_CONFIG": str(tmp_path / "dask"), "HOME": str(tmp_path)})
    assert done.returncode == 1, done.stderr
    assert "REFUSED: queue='gpuz' is not a partition" in done.stderr
    assert "comes from profile 'mysite' (hpcgpu.profiles.mysite.queue)" in done.stderr


@pytest.mark.sge
def test_the_real_sge_says_a_refused_queue_came_from_the_users_config(sge, tmp_path):
    import dask.config

    users = _users_config(tmp_path, {"hpcgpu": {"sge": {"queue": "gpu.q"}}})
    with dask.config.set(users), pytest.raises(ValueError) as refused:
        SGECluster(gpus_per_node=2, log_directory=str(tmp_path))
    assert str(refused.value).endswith(
        "queues that exist and can run this job: all.q (the value comes from hpcgpu.sge.queue "
        "of your dask config: ~/.config/dask/*.yaml or DASK_* variables)")
