"""dask-jobqueue's API on hpcgpu's clusters: CPU workers, config sections, scale/adapt.

The expected scripts in tests/data/jobqueue/ were rendered by dask-jobqueue 0.9 itself
(tests/data/jobqueue/capture.py) for the arguments in cases.json; hpcgpu must render the
same text for the same arguments (TLS off, as dask-jobqueue's default, for the comparison).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import textwrap
from pathlib import Path

import dask.config
import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from hpcgpu import LSFCluster, PBSCluster, SGECluster, SLURMCluster
from hpcgpu.cluster.batch.scaling import jobs_for
from hpcgpu.jobspec.cpushape import CPUJobShape
from hpcgpu.system import commands
from hpcgpu.system.commands import CommandResult
from hpcgpu.system.pymain import SAFE_MAIN_AND_CHILDREN

DATA = Path(__file__).parents[1] / "data" / "jobqueue"
CASES = json.loads((DATA / "cases.json").read_text())
CLASSES = {"slurm": SLURMCluster, "pbs": PBSCluster, "lsf": LSFCluster, "sge": SGECluster}
QUIET = {"scheduler_options": {"dashboard_address": "localhost:0"}}


#: hpcgpu's one addition to dask-jobqueue's worker command: the worker's HTTP server
#: (/metrics, no password) on loopback, not every interface (#38)
LOOPBACK_HTTP = " --dashboard-address 127.0.0.1:0"


#: and its worker line's ``python -m`` becomes ``python -c CODE``: the job's working
#: directory, maybe a shared one, is not on the worker's import path (#38)
SAFE = f" -c {shlex.quote(SAFE_MAIN_AND_CHILDREN)} "


def normalise(script: str, cluster) -> str:
    assert script.count(LOOPBACK_HTTP) == 1 and script.count(SAFE) == 1 and " -m " not in script, script
    script = script.replace(LOOPBACK_HTTP, "").replace(SAFE, " -m ")
    return script.replace(cluster.scheduler.address, "SCHEDULER").replace(sys.executable, "PYTHON")


@pytest.fixture
def make():
    made = []

    def make(cls, *positional, **options):
        cluster = cls(*positional, **{**QUIET, **options})
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture
def no_sinfo():
    """The cases' partitions are dask-jobqueue's ('regular'), not the local SLURM's: its
    partition check is left out, as on a host without SLURM."""
    real = commands.runner
    commands.set_runner(lambda argv, timeout, input: real(argv, timeout, input)
                        if argv[0] != "sinfo" else CommandResult(tuple(argv), 127, "", "no"))
    yield
    commands.set_runner(None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_script_is_dask_jobqueues(case, no_sinfo, make):
    spec = CASES[case]
    cluster = make(CLASSES[spec["scheduler"]], security=False, **spec["options"])
    expected = (DATA / f"{case}.sh").read_text()
    # dask-jobqueue after 0.9.0 also asks SLURM for one node (dask-jobqueue#680); hpcgpu
    # adds that line with 0.9.0 too (the fixtures are 0.9.0's).
    expected = expected.replace("#SBATCH -n 1\n", "#SBATCH -n 1\n#SBATCH -N 1\n")
    script = cluster.job_script()
    if "log_directory" not in spec["options"]:
        # The one difference: hpcgpu's default log directory (dask-jobqueue's jobs write
        # slurm-<id>.out into the working directory), in dask-jobqueue's own lines.
        lines = script.splitlines(keepends=True)
        logs = [line for line in lines if f" {cluster._log_directory}/" in line]
        assert len(logs) == 2, script
        script = "".join(line for line in lines if line not in logs)
    assert normalise(script, cluster) == expected


@pytest.mark.parametrize("scheduler,lines", [
    ("slurm", ["#SBATCH -J dask-worker", "#SBATCH -n 1", "#SBATCH -N 1",
               "#SBATCH --cpus-per-task=8",
               "#SBATCH --mem=27G", "#SBATCH -t 00:02:00"]),
    ("pbs", ["#PBS -N dask-worker", "#PBS -l select=1:ncpus=8:mem=27GB",
             "#PBS -l walltime=00:02:00"]),
    ("lsf", ["#BSUB -J dask-worker", "#BSUB -n 8", '#BSUB -R "span[hosts=1]"',
             "#BSUB -M 28000", "#BSUB -W 00:02"]),
    ("sge", ["#$ -N dask-worker", "#$ -l h_rt=00:02:00", "#$ -cwd", "#$ -j y"]),
])
def test_header_and_worker_command_with_tls(scheduler, lines, make):
    walltime = "00:02" if scheduler == "lsf" else "00:02:00"
    extra = {"lsf_units": "mb"} if scheduler == "lsf" else {}
    cluster = make(CLASSES[scheduler], cores=8, processes=4, memory="28GB", walltime=walltime,
                   **extra)
    assert without_logs(cluster.job_header, cluster) == lines
    command = cluster.job_script().strip().splitlines()[-1]
    assert command.startswith(f"{sys.executable}{SAFE}distributed.cli.dask_worker tls://")
    for part in ("--nthreads 2", "--memory-limit 6.52GiB", "--nworkers 4", "--protocol tls://"):
        assert part in command
    # TLS on by default, as for GPU workers: the script names the cluster's private
    # credential files (hpcgpu.cluster.batch.private), never carries a PEM.
    private = cluster.private_directory.made
    assert f"--tls-key {private}/key.pem" in command and "PRIVATE KEY" not in cluster.job_script()
    assert cluster.job_name == "dask-worker" and cluster.workers_per_job == 4
    assert cluster.gpus_per_job == 0


def test_cpu_arguments_with_gpus_get_one_clear_error():
    with pytest.raises(ValueError, match=r"processes=4 .* use gpus_per_node \(one worker per GPU\)"
                       r" instead of processes, or drop gpus_per_node"):
        SLURMCluster(processes=4, cores=8, memory="8GB", gpus_per_node=4)
    with pytest.raises(ValueError, match=r"cores=8 .* use cpus_per_gpu"):
        SGECluster(cores=8, memory="8GB", nodes=2)


def test_missing_memory_gets_dask_jobqueues_error():
    with pytest.raises(ValueError, match=re.escape("cluster = SLURMCluster(cores=8, memory='24GB')")):
        SLURMCluster(cores=8)


def test_unknown_cpu_option_is_named():
    with pytest.raises(ValueError, match="unexpected keyword argument 'coers'.+SLURMCluster"):
        SLURMCluster(cores=8, memory="8GB", coers=2)


@pytest.mark.parametrize("name", ["host", "dashboard_address"])
def test_scheduler_arguments_go_through_scheduler_options(name):
    with pytest.raises(ValueError, match=f"pass '{name}' through 'scheduler_options'"):
        PBSCluster(cores=1, memory="1GB", **{name: "localhost:0"})


def test_interface_feeds_the_scheduler_unless_it_has_its_own(make):
    both = make(SGECluster, cores=1, memory="1GB", interface="lo", security=False)
    assert both.scheduler_spec["options"]["interface"] == "lo"
    assert both.new_spec["options"]["interface"] == "lo"
    own = make(SGECluster, cores=1, memory="1GB", interface="lo", security=False,
               scheduler_options={"host": "127.0.0.1", "dashboard_address": "localhost:0"})
    assert "interface" not in own.scheduler_spec["options"]
    assert own.scheduler.address.startswith("tcp://127.0.0.1:")


def test_workers_on_an_interface_the_scheduler_host_lacks(make):
    """dask-jobqueue's ``test_scheduler_options_interface``: the workers' ``interface`` is
    the compute hosts' (``ib0`` where the login host has none); with the scheduler's own in
    ``scheduler_options``, only that one must exist here (before: refused, naming this host)."""
    cluster = make(SGECluster, cores=1, memory="1GB", interface="ib-only-on-nodes", security=False,
                   scheduler_options={"interface": "lo", "dashboard_address": "localhost:0"})
    assert cluster.scheduler_spec["options"]["interface"] == "lo"
    assert "--interface ib-only-on-nodes" in cluster.job_script()
    gpu = make(SLURMCluster, gpus_per_node=1, interface="ib-only-on-nodes", security=False,
               scheduler_options={"interface": "lo", "dashboard_address": "localhost:0"})
    assert gpu.scheduler.address.startswith("tcp://127.0.0.1:")
    with pytest.raises(ValueError, match="interface 'ib-only-on-nodes' does not exist on host"):
        SLURMCluster(cores=1, memory="1GB", interface="ib-only-on-nodes")  # the scheduler's too
    with pytest.raises(ValueError, match="interface 'nowhere' does not exist on host"):
        SLURMCluster(cores=1, memory="1GB", scheduler_options={"interface": "nowhere"})


def test_first_positional_is_n_workers_as_in_dask_jobqueue(make, fake_submit):
    """``SLURMCluster(2, cores=..., memory=...)``: dask-jobqueue's first positional argument
    (before: ``scheduler=2 is an int: give a string``)."""
    cluster = make(SLURMCluster, 2, cores=1, memory="1GB", poll_interval=3600)
    assert len(cluster.worker_spec) == 2 and cluster.scheduler_name == "slurm"
    with pytest.raises(ValueError, match="n_workers=-1 must be a whole number"):
        SLURMCluster(-1, cores=1, memory="1GB")


@pytest.mark.parametrize("cls", CLASSES.values())
def test_help_names_dask_jobqueues_job_arguments(cls):
    assert "cores : int" in cls.__doc__ and cls.__name__ in cls.__doc__  # dask-jobqueue's test_docstring_cluster


def test_gpus_per_node_zero_means_cpu_workers(make):
    cluster = make(SLURMCluster, gpus_per_node=0, cores=4, memory="4GB", security=False)
    assert "--cpus-per-task=4" in cluster.job_header
    assert "--gres" not in cluster.job_script() and "gpus" not in cluster.job_script()


def test_gpu_clusters_have_a_job_header(make):
    cluster = make(SLURMCluster, gpus_per_node=2, cpus_per_gpu=4, walltime="00:10:00")
    assert "#SBATCH --gpus-per-node=2" in cluster.job_header.splitlines()
    assert cluster.job_header in cluster.job_script()


# ---------------------------------------------------------------------- configuration
JOBQUEUE_YAML = textwrap.dedent("""
    jobqueue:
      slurm:
        cores: 6
        processes: 3
        memory: 12GB
        walltime: "00:20:00"
        queue: debug
        account: team
        job-extra-directives: ["--exclusive"]
        job-script-prologue: ["echo from-config"]
        worker-extra-args: ["--lifetime", "15m"]
      my-site:
        cores: 4
        memory: 8GB
        walltime: "00:05:00"
        name: site-worker
        resource-spec: "h_vmem=2G"
""")


@pytest.fixture
def jobqueue_yaml(tmp_path):
    """A user's jobqueue.yaml, read by dask's own loader and merged key by key over the
    packaged defaults (as ~/.config/dask/jobqueue.yaml would be)."""
    path = tmp_path / "jobqueue.yaml"
    path.write_text(JOBQUEUE_YAML)
    loaded = dask.config.collect(paths=[str(tmp_path)], env={})["jobqueue"]
    # A new section is a copy of a packaged one (dask-jobqueue reads every key of it).
    loaded["my-site"] = {**dask.config.get("jobqueue.sge"), **loaded["my-site"]}
    flat = {f"jobqueue.{section}.{key}": value
            for section, values in loaded.items() for key, value in values.items()}
    with dask.config.set(flat):
        yield path


def without_logs(header: str, cluster) -> list[str]:
    """The header's lines but the two that name hpcgpu's default log directory (which
    dask-jobqueue's jobs lack: they write slurm-<id>.out into the working directory)."""
    lines = header.splitlines()
    kept = [line for line in lines if f" {cluster._log_directory}/" not in line]
    assert len(kept) == len(lines) - 2, lines
    return kept


def test_jobqueue_yaml_section_alone_makes_the_cluster(jobqueue_yaml, make):
    cluster = make(SLURMCluster, security=False)
    header = without_logs(cluster.job_header, cluster)
    assert header == ["#SBATCH -J dask-worker", "#SBATCH -p debug", "#SBATCH -A team",
                      "#SBATCH -n 1", "#SBATCH -N 1", "#SBATCH --cpus-per-task=6",
                      "#SBATCH --mem=12G",
                      "#SBATCH -t 00:20:00", "#SBATCH --exclusive"]
    script = cluster.job_script()
    assert "echo from-config\n" in script
    assert "--nthreads 2 --memory-limit 3.73GiB --nworkers 3" in script
    assert script.rstrip().endswith("--lifetime 15m")


def test_arguments_win_over_the_yaml(jobqueue_yaml, make):
    cluster = make(SLURMCluster, security=False, cores=2, queue="gpu", processes=1)
    assert "#SBATCH -p gpu" in cluster.job_header and "--cpus-per-task=2" in cluster.job_header
    assert "#SBATCH --mem=12G" in cluster.job_header  # memory still from the yaml
    assert "--nworkers" not in cluster.job_script()


def test_config_name_picks_another_section(jobqueue_yaml, make):
    cluster = make(SGECluster, config_name="my-site", security=False)
    assert cluster.job_header.splitlines()[:3] == [
        "#$ -N site-worker", "#$ -l h_vmem=2G", "#$ -l h_rt=00:05:00"]
    # processes not set: dask-jobqueue splits 4 cores into 4 single-threaded workers
    assert "--nthreads 1 --memory-limit 1.86GiB --nworkers 4" in cluster.job_script()
    assert cluster.job_name == "site-worker"


def test_gpu_request_ignores_the_cpu_section(jobqueue_yaml, make):
    cluster = make(SLURMCluster, gpus_per_node=2)
    assert cluster.workers_per_job == 2 and "--gpus-per-node=2" in cluster.job_header
    # Shared keys (queue, walltime, extra directives) still come from the section, as before.
    for line in ("#SBATCH --partition=debug", "#SBATCH --time=00:20:00", "#SBATCH --exclusive"):
        assert line in cluster.job_header.splitlines()


def test_job_script_epilogue_follows_the_worker_command(make):
    cluster = make(SLURMCluster, cores=2, memory="2GB", security=False,
                   job_script_epilogue=['echo "Job finished"'])
    lines = cluster.job_script().rstrip("\n").splitlines()
    assert "distributed.cli.dask_worker" in lines[-2] and lines[-1] == 'echo "Job finished"'
    skipped = make(SLURMCluster, cores=2, memory="2GB", security=False,
                   job_directives_skip=["-N 1"])
    assert "#SBATCH -N 1" not in skipped.job_header and "#SBATCH -n 1" in skipped.job_header


def test_deprecated_project_warns_and_becomes_account(make):
    with pytest.warns(FutureWarning, match="project has been renamed to account"):
        cluster = make(SLURMCluster, cores=2, memory="2GB", project="old", security=False)
    assert "#SBATCH -A old" in cluster.job_header


def test_lsf_project_with_spaces_is_quoted_and_what_would_leave_the_quotes_is_refused(make):
    """dask-jobqueue's test_lsf: ``project="Dask On LSF"`` goes in double quotes; a quote,
    backslash, ``$`` or backtick there could end them (``#BSUB -Ep`` runs a command)."""
    cluster = make(LSFCluster, cores=8, memory="28GB", project="Dask On LSF", security=False)
    assert '#BSUB -P "Dask On LSF"' in cluster.job_header
    for bad in ('x" -Ep "touch /tmp/p', "a$b", "a`id`", "a\\b", "it's"):
        with pytest.raises(ValueError, match="project=.*cannot go inside a quoted scheduler directive"):
            LSFCluster(cores=8, memory="28GB", project=bad, security=False)
    with pytest.raises(ValueError, match="project='Dask On PBS' holds ' '"):  # PBS writes it unquoted
        PBSCluster(cores=8, memory="28GB", project="Dask On PBS", security=False)


def test_nothing_written_to_home(tmp_path):
    """Importing hpcgpu (and so dask-jobqueue) and making a CPU cluster from a jobqueue
    section leave a fresh HOME empty; dask-jobqueue alone copies its jobqueue.yaml there."""
    import os
    import subprocess

    code = ("import dask, hpcgpu\n"
            "from hpcgpu import SLURMCluster\n"
            "with dask.config.set({'jobqueue.slurm.cores': 2, 'jobqueue.slurm.memory': '2GB'}):\n"
            "    c = SLURMCluster(security=False, scheduler_options={'dashboard_address': ':0'})\n"
            "    assert '--cpus-per-task=2' in c.job_script()\n"
            "    c.close()\n")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    env.pop("DASK_CONFIG", None)
    subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, cwd=work, check=True,
                   timeout=120)
    # Only hpcgpu's default log directory, as for GPU clusters (docs/cluster.md); empty.
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == [
        ".cache", ".cache/hpcgpu", ".cache/hpcgpu/logs"]
    plain = subprocess.run([sys.executable, "-c", "import dask_jobqueue"], env=env, cwd=work,
                           timeout=120)
    assert plain.returncode == 0 and list(home.rglob("jobqueue.yaml"))  # the test can fail


# ---------------------------------------------------------------------- scale and adapt
def submitted_jobs(calls):
    return [argv for argv, _ in calls if "sbatch" in argv or "qsub" in argv
            or any("bsub" in a for a in argv)]


@pytest.mark.parametrize("call,jobs", [
    (dict(n=10), 3), (dict(jobs=2), 2), (dict(cores=20), 3), (dict(memory="60GB"), 3),
    (dict(cores=8, memory="100GB"), 4), (dict(n=1, cores=17), 3),
])
def test_scale_arithmetic(call, jobs, make, fake_submit):
    cluster = make(SLURMCluster, cores=8, processes=4, memory="28GB", poll_interval=3600)
    cluster.scale(**call)
    assert len(cluster.worker_spec) == jobs
    from conftest import wait_for

    wait_for(lambda: len(submitted_jobs(fake_submit)) == jobs, 30, what="submissions")
    cluster.scale(0)
    wait_for(lambda: sum("scancel" in a for a, _ in fake_submit) >= 1, 30, what="the cancel")


def test_scale_gpu_cluster_by_cores_and_memory(make, fake_submit):
    cluster = make(SLURMCluster, gpus_per_node=2, cpus_per_gpu=4, memory_per_gpu="10GB",
                   poll_interval=3600)
    cluster.scale(cores=17)  # 8 cores a job
    assert len(cluster.worker_spec) == 3
    cluster.scale(memory="40GB")  # 20 GB a job
    assert len(cluster.worker_spec) == 2


@pytest.mark.parametrize("kwargs,low,high", [
    (dict(minimum=0, maximum=10), 0, 8), (dict(minimum_jobs=1, maximum_jobs=4), 4, 16),
    (dict(minimum=5, maximum=40), 8, 40), (dict(minimum_cores=9, maximum_cores=40), 8, 20),
    (dict(maximum_memory="60GB"), 0, 8),
])
def test_adapt_limits_in_whole_jobs(kwargs, low, high, make, fake_submit):
    cluster = make(SLURMCluster, cores=8, processes=4, memory="28GB", poll_interval=3600)
    adaptive = cluster.adapt(interval="1h", **kwargs)
    assert (adaptive.minimum, adaptive.maximum) == (low, high)
    adaptive.stop()


def test_worker_names_map_to_their_job(make):
    many = make(SLURMCluster, cores=4, processes=2, memory="4GB", security=False)
    one = make(SLURMCluster, cores=4, processes=1, memory="4GB", security=False)
    gpu = make(SLURMCluster, gpus_per_node=2)
    assert many.new_spec["group"] == ["-0", "-1"] and "group" not in one.new_spec
    assert many.job_key("SLURMCluster-3-1") == "SLURMCluster-3"
    assert one.job_key("SLURMCluster-3") == "SLURMCluster-3"
    assert gpu.job_key("SLURMCluster-3-0-1") == "SLURMCluster-3"


def test_yaml_in_tests_is_valid():
    assert yaml.safe_load(JOBQUEUE_YAML)["jobqueue"]["slurm"]["cores"] == 6


@given(cores=st.integers(1, 256), processes=st.integers(1, 256),
       memory=st.integers(1, 2**42), want_cores=st.integers(0, 10**6),
       want_memory=st.integers(0, 2**62))
def test_scale_takes_the_fewest_whole_jobs_that_hold_the_request(
        cores, processes, memory, want_cores, want_memory):
    assume(processes <= cores)
    shape = CPUJobShape(cores=cores, processes=processes, memory=memory)
    jobs = jobs_for(shape, cores=want_cores, memory=want_memory)
    assert jobs * cores >= want_cores and jobs * memory >= want_memory
    if jobs:
        assert (jobs - 1) * cores < want_cores or (jobs - 1) * memory < want_memory
    most = jobs_for(shape, cores=want_cores, memory=want_memory, up=False)
    assert most * cores <= want_cores and most * memory <= want_memory
    assert (most + 1) * cores > want_cores or (most + 1) * memory > want_memory


@given(cores=st.integers(-3, 300), processes=st.integers(-3, 300))
def test_cpu_shape_refuses_what_cannot_run(cores, processes):
    if 1 <= processes <= cores:
        shape = CPUJobShape(cores=cores, processes=processes, memory=2**30)
        assert shape.worker_process_threads * processes <= cores
        assert shape.worker_process_threads >= 1
    else:
        with pytest.raises(ValueError, match="processes|cores"):
            CPUJobShape(cores=cores, processes=processes, memory=2**30)
