"""Reading the allocation from each batch system's environment (pure functions)."""

from __future__ import annotations

import pytest

from hpcgpu.runner.allocation import detect_allocation
from hpcgpu.runner.launch import workers_argv
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.worker_command import WorkerCommand


def no_gpus() -> None:
    return None


def test_slurm_gpus_on_node_and_node_count():
    env = {"SLURM_JOB_ID": "12", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4",
           "SLURM_CPUS_ON_NODE": "64"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    assert (a.scheduler, a.job_id, a.nodes, a.gpus_per_node, a.cpus_per_gpu) == ("slurm", "12", 2, 4, 16)
    assert a.default_launcher == "srun"


def test_slurm_gres_job_gpus_when_gpus_on_node_missing():
    env = {"SLURM_JOB_ID": "1", "SLURM_NNODES": "1", "SLURM_JOB_GPUS": "0,2,3"}
    assert detect_allocation(env, probe_gpus=no_gpus).gpus_per_node == 3


def test_pbs_nodefile_lists_each_node_once_per_slot(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x1001\nx1001\nx1002\nx1002\n")
    env = {"PBS_JOBID": "9.pbs01", "PBS_NODEFILE": str(nodefile), "NCPUS": "32",
           "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c,GPU-d"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    assert (a.scheduler, a.job_id, a.nodes, a.hosts, a.gpus_per_node) == (
        "pbs", "9.pbs01", 2, ("x1001", "x1002"), 4)
    assert a.default_launcher == "mpiexec"


def test_lsf_skips_the_launch_node():
    env = {"LSB_JOBID": "77", "LSB_MCPU_HOSTS": "batch3 1 a01n01 42 a01n02 42",
           "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    assert (a.nodes, a.hosts, a.gpus_per_node, a.cpus_per_gpu) == (2, ("a01n01", "a01n02"), 6, 7)


def test_sge_pe_hostfile_and_granted_gpus(tmp_path):
    hostfile = tmp_path / "pe"
    hostfile.write_text("vm 2 all.q@vm UNDEFINED\n")
    env = {"JOB_ID": "5", "SGE_ROOT": "/var/lib/gridengine", "PE_HOSTFILE": str(hostfile),
           "NSLOTS": "2", "SGE_HGR_gpu": "2 3", "CUDA_VISIBLE_DEVICES": "2,3"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    assert (a.scheduler, a.nodes, a.gpus_per_node, a.default_launcher) == ("sge", 1, 2, "direct")


def test_outside_a_job_uses_nvidia_smi_and_direct():
    a = detect_allocation({}, probe_gpus=lambda: 8)
    assert (a.scheduler, a.nodes, a.gpus_per_node, a.default_launcher) == (None, 1, 8, "direct")


def test_options_win_and_bad_options_name_the_field():
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "4", "SLURM_GPUS_ON_NODE": "4"}
    assert detect_allocation(env, nodes=2, gpus_per_node=1).total_gpus == 2
    with pytest.raises(ValueError, match="nodes=0 must be"):
        detect_allocation(env, nodes=0)


def test_direct_refuses_several_nodes():
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    with pytest.raises(ValueError, match="launcher='direct' starts workers on one node only"):
        workers_argv(a, get_launcher("direct"), WorkerCommand(scheduler="tls://x:1"), "py")


def test_lsf_djob_hostfile_one_line_per_slot(tmp_path):
    # as LSF writes it for bsub -nnodes 2 on a CORAL-style site: the launch node once,
    # then each compute node once per slot
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("batch3\n" + "a01n01\n" * 42 + "a01n02\n" * 42)
    env = {"LSB_JOBID": "78", "LSB_DJOB_HOSTFILE": str(hostfile), "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    assert (a.nodes, a.hosts, a.gpus_per_node, a.cpus_per_node) == (2, ("a01n01", "a01n02"), 4, 42)
    assert a.default_launcher == "jsrun"


def test_pbs_nodefile_with_mpiprocs_and_the_gpus_the_cgroup_hook_gives(tmp_path):
    # select=2:ncpus=32:ngpus=4:mpiprocs=4: each host listed once per mpiproc
    nodefile = tmp_path / "aqua"
    nodefile.write_text("x3001c0s7b0n0\n" * 4 + "x3001c0s7b1n0\n" * 4)
    env = {"PBS_JOBID": "1234.pbs01", "PBS_NODEFILE": str(nodefile), "NCPUS": "32",
           "CUDA_VISIBLE_DEVICES": "GPU-1f2,GPU-3a4,GPU-5b6,GPU-7c8"}
    a = detect_allocation(env, probe_gpus=no_gpus)
    assert (a.nodes, a.total_gpus, a.cpus_per_gpu, a.uniform) == (2, 8, 8, True)
