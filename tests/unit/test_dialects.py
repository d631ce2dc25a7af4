import re
import shlex

import pytest

from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import JobScript, render, worker_job_script
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.worker_command import WorkerCommand
from hpcgpu.system.pymain import SAFE_MAIN

SHAPE = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8, memory_per_gpu="60GiB",
                           walltime="1-00:00:00", queue="gpu", account="proj1", job_name="ana")
SITE = {"sge": {"multi_node_parallel_environment": "mpi-4"}}
WORKER = WorkerCommand(scheduler="tls://10.1.2.3:8786", nthreads=8)


def script_for(scheduler, launcher=None, shape=SHAPE, one_task_per=None, **site):
    dialect = get_dialect(scheduler, **{**SITE.get(scheduler, {}), **site})
    launcher = get_launcher(launcher or dialect.default_launcher if shape.nodes == 1 or scheduler != "sge" else "mpirun",
                            one_task_per=one_task_per)
    return render(worker_job_script(shape, dialect, launcher, WORKER))


@pytest.mark.parametrize(
    "scheduler, gpu_request, tasks",
    [
        ("slurm", "#SBATCH --gpus-per-node=4", ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4"]),
        ("pbs", "ngpus=4", ["select=2:", "mpiprocs=4"]),
        ("lsf", '#BSUB -gpu "num=4:mode=exclusive_process"', ["#BSUB -n 8", 'span[ptile=4]']),
        ("sge", "#$ -l gpu=1", ["#$ -pe mpi-4 8"]),
    ],
)
def test_each_scheduler_carries_gpus_and_one_task_per_gpu(scheduler, gpu_request, tasks):
    text = script_for(scheduler)
    assert gpu_request in text
    for task in tasks:
        assert task in text
    # as -m, without the job's directory on sys.path (#38)
    assert f"python3 -c {shlex.quote(SAFE_MAIN)} hpcgpu.worker tls://10.1.2.3:8786" in text


def test_slurm_memory_and_time_directives():
    text = script_for("slurm")
    assert "#SBATCH --mem=240G" in text and "--mem-per-gpu" not in text
    assert "#SBATCH --time=1-00:00:00" in text
    assert "#SBATCH --partition=gpu" in text and "#SBATCH --account=proj1" in text
    per_gpu = script_for("slurm", memory_directive="mem-per-gpu")
    assert "#SBATCH --mem-per-gpu=60G" in per_gpu and "--mem=" not in per_gpu


def test_slurm_gres_site_option_and_gpu_type():
    shape = GPUJobShape.create(gpus_per_node=2, gpu_type="a100")
    assert "#SBATCH --gres=gpu:a100:2" in script_for("slurm", shape=shape, gpu_directive="gres")
    assert "#SBATCH --gpus-per-node=a100:2" in script_for("slurm", shape=shape)


def test_srun_starts_one_task_per_node_that_starts_a_worker_per_gpu():
    text = script_for("slurm")
    assert re.search(r"^srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 "
                     rf"--kill-on-bad-exit=1 python3 -c {re.escape(shlex.quote(SAFE_MAIN))} hpcgpu.worker .* "
                     r"--gpus-per-node 4$", text, re.M)
    assert "--gpus-per-task" not in text


def test_srun_one_task_per_gpu_gives_each_task_one_gpu():
    per_gpu = render(worker_job_script(SHAPE, get_dialect("slurm"),
                                       get_launcher("srun", one_task_per="gpu"), WORKER))
    assert re.search(r"^srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=8 --gpus-per-task=1 ",
                     per_gpu, re.M)
    assert "--gpus-per-node 4" not in per_gpu
    bind = render(worker_job_script(SHAPE, get_dialect("slurm"), get_launcher("srun", "gpu-bind"), WORKER))
    assert "--gpu-bind=single:1" in bind and "--gpus-per-task" not in bind
    with pytest.raises(ValueError, match="gpu_binding='gpu-bind' binds a GPU to each task"):
        get_launcher("srun", "gpu-bind", one_task_per="node")
    with pytest.raises(ValueError, match="one_task_per='socket': use 'node'"):
        get_launcher("srun", one_task_per="socket")


def test_pbs_directives():
    text = script_for("pbs")
    assert "#PBS -l select=2:ncpus=32:ngpus=4:mpiprocs=4:ompthreads=8:mem=240gb" in text
    assert "#PBS -l walltime=24:00:00" in text and "#PBS -l place=scatter\n" in text
    assert "mpiexec -n 2 --ppn 1 python3" in text
    assert "mpiexec -n 8 --ppn 4 python3" in script_for("pbs", one_task_per="gpu")
    custom = script_for("pbs", gpu_resource="gpus")
    assert ":gpus=4:" in custom and "ngpus" not in custom


def test_lsf_directives():
    text = script_for("lsf")
    assert "#BSUB -W 24:00" in text and "#BSUB -P proj1" in text and "#BSUB -q gpu" in text
    assert '#BSUB -R "rusage[mem=61440]"' in text
    assert "jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 4 --cpu_per_rs 32" in text
    assert "jsrun --nrs 8 --rs_per_host 4 --tasks_per_rs 1 --gpu_per_rs 1" in script_for(
        "lsf", one_task_per="gpu")
    with pytest.raises(ValueError, match="memory_unit='PB'"):
        get_dialect("lsf", memory_unit="PB")


def test_sge_multi_node_needs_a_spanning_pe():
    with pytest.raises(ValueError, match="multi_node_parallel_environment"):
        script_for("sge", multi_node_parallel_environment=None)
    one = GPUJobShape.create(gpus_per_node=4, memory_per_gpu="8GiB")
    text = script_for("sge", shape=one)
    assert "#$ -pe smp 4" in text and "#$ -l h_vmem=8G" in text
    job = script_for("sge", shape=one, gpu_consumable="job", gpu_complex="gpus")
    assert "#$ -l gpus=4" in job


def test_direct_launcher_is_single_node():
    with pytest.raises(ValueError, match="launcher='direct' starts workers on one node only"):
        worker_job_script(SHAPE, get_dialect("slurm"), get_launcher("direct"), WORKER)
    one = GPUJobShape.create(gpus_per_node=4)
    text = render(worker_job_script(one, get_dialect("slurm"), get_launcher("direct"), WORKER))
    assert "--launcher direct --gpus-per-node 4" in text
    assert "\nsrun" not in text


def test_unknown_site_option_and_scheduler():
    with pytest.raises(ValueError, match="unknown slurm site option"):
        get_dialect("slurm", gres_name="gpu")
    with pytest.raises(ValueError, match="scheduler='torque' is not supported"):
        get_dialect("torque")


def test_escape_hatches():
    script = worker_job_script(
        SHAPE, get_dialect("slurm"), get_launcher("srun"), WORKER,
        job_extra_directives=("--constraint=a100", "#SBATCH --qos=high"),
        job_directives_skip=("--account",),
        job_script_prologue=("module load cuda/12",), job_script_epilogue=("echo bye",),
        shebang="#!/bin/bash -l",
    )
    text = render(script)
    assert text.startswith("#!/bin/bash -l\n")
    assert "#SBATCH --constraint=a100\n" in text and "#SBATCH --qos=high\n" in text
    assert "--account" not in text
    assert text.index("module load cuda/12") < text.index("\nsrun ")
    assert text.rstrip().endswith("echo bye\nexit $status")
    with pytest.raises(ValueError, match="newline"):
        render(JobScript(SHAPE, get_dialect("slurm"), get_launcher("srun"), "true",
                         job_extra_directives=("--a\n--b",)))


@pytest.mark.parametrize(
    "scheduler, output, job_id",
    [("slurm", "12345\n", "12345"), ("slurm", "12345;cluster\n", "12345"),
     ("pbs", "4321.pbs01.example.org\n", "4321.pbs01.example.org"),
     ("lsf", "Job <987> is submitted to queue <gpu>.\n", "987"),
     ("sge", "55\n", "55"), ("sge", 'Your job 56 ("x") has been submitted\n', "56")],
)
def test_job_id_parsing(scheduler, output, job_id):
    assert get_dialect(scheduler).parse_job_id(output) == job_id


def test_job_id_parsing_failure_shows_output():
    with pytest.raises(ValueError, match="sbatch: error"):
        get_dialect("slurm").parse_job_id("sbatch: error: something\n")


def test_sge_multi_node_points_to_mpirun_and_the_pe():
    from hpcgpu import SGECluster

    with pytest.raises(ValueError, match="multi_node_parallel_environment.*launcher='mpirun'"):
        SGECluster(nodes=2, gpus_per_node=4)
    with pytest.raises(ValueError, match=r"use launcher='mpirun', or nodes=1") as caught:
        SGECluster(nodes=2, gpus_per_node=4, site={"multi_node_parallel_environment": "mpi"})
    assert "srun" not in str(caught.value) and "jsrun" not in str(caught.value)
