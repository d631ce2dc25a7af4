"""``sbatch`` of jobscripts/slurm-2x4.sbatch on the real local SLURM (fake nodes and GPUs).

The file is submitted as it is; sbatch options on the command line shrink it to the
test's size (they take precedence over the #SBATCH lines), so the tests stay small.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import venv

import pytest

from batchtools import CHECK, ROOT, job_output, processes_with, sbatch_wrap, slurm_finished, slurm_state
from conftest import gpus_per_node, wait_for

pytestmark = pytest.mark.slurm

SCRIPT = ROOT / "jobscripts" / "slurm-2x4.sbatch"


#: a JupyterHub-like dashboard link template (jupyter-server-proxy's path under a user's server)
HUB_LINK = "/user/{USER}/proxy/{port}/status"


def sbatch(tmp_path, nodes: int, gpus: int, *args: str, script=SCRIPT, export: str = "") -> str:
    argv = ["sbatch", "--parsable", f"--nodes={nodes}", f"--ntasks-per-node={gpus}",
            f"--gpus-per-node={gpus}", "--cpus-per-task=1", "--mem=2G", "--time=5",
            "--job-name=hpcgpu-batch-test", f"--chdir={tmp_path}",
            f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err",
            f"--export=ALL,HPCGPU_PYTHON={sys.executable},XDG_CACHE_HOME={tmp_path}/cache{export}",
            str(script), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def test_sbatch_runs_one_worker_per_gpu_on_two_nodes(slurm, tmp_path):
    job_id = sbatch(tmp_path, 2, 2, str(CHECK), "--expect", "4", "--json", "result.json",
                    export=f",DASK_DISTRIBUTED__DASHBOARD__LINK={HUB_LINK},USER=hubuser")
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    assert state == ("COMPLETED", "0:0"), job_output(tmp_path, f"{job_id}.*")[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(result["checks"].values()), result
    # one worker per (node, GPU): 2 fake nodes x GPUs 0 and 1, each worker's own
    # which GPUs is SLURM's choice: other jobs may hold GPUs 0 and 1
    assert gpus_per_node(result["places"].values()) == {0: 2, 1: 2}, result
    assert sorted(result["workers"]) == [f"{job_id}-{n}-{g}" for n in (0, 1) for g in (0, 1)]
    # the job directory went in the per-user private directory (not ./.hpcgpu), and went away
    logs = tmp_path / "cache" / "hpcgpu" / "logs"
    assert not (tmp_path / ".hpcgpu").exists() and len(list(logs.glob(".hpcgpu-*"))) == 1
    assert list(logs.glob(".hpcgpu-*/*")) == []
    # A clean end: the nannies stopped their workers before the scheduler closed.
    text = job_output(tmp_path, f"{job_id}.*")
    assert "End worker" in text and "Traceback" not in text, text[-5000:]
    # the dashboard's line: dask's link template (as cluster mode's dashboard_link), and the
    # ssh tunnel to the first node's loopback, where it listens
    said = re.search(r"hpcgpu run: dashboard: /user/hubuser/proxy/(\d+)/status on (\S+) \(this node "
                     r"only, no password\); from your own machine: ssh -L \1:localhost:\1 \2, then "
                     r"open http://localhost:\1/status", text)
    assert said, text[-5000:]


def test_failing_script_fails_the_job_with_its_exit_code(slurm, tmp_path):
    job_id = sbatch(tmp_path, 1, 1, str(CHECK), "--expect", "1", "--exit-code", "3")
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    assert state == ("FAILED", "3:0"), job_output(tmp_path, f"{job_id}.*")[-4000:]


def test_sbatch_without_the_environment_says_what_to_do(slurm, tmp_path):
    """#43: sbatch from a shell whose python3 has no hpcgpu (a bare venv's first on PATH,
    no HPCGPU_PYTHON) fails at once, saying what to do, not 'No module named hpcgpu'."""
    venv.create(tmp_path / "bare", with_pip=False)
    env = {k: v for k, v in os.environ.items() if k not in ("HPCGPU_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{tmp_path / 'bare' / 'bin'}{os.pathsep}{env['PATH']}"
    argv = ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=1", "--gpus-per-node=1",
            "--cpus-per-task=1", "--mem=1G", "--time=5", "--job-name=hpcgpu-batch-test",
            f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err",
            str(SCRIPT), str(CHECK)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    err = (tmp_path / f"{job_id}.err").read_text()
    assert state == ("FAILED", "2:0"), err
    python = tmp_path / "bare" / "bin" / "python3"
    assert err.startswith(f"hpcgpu: python3 ({python}) on "), err
    assert "has no hpcgpu: activate the environment that has hpcgpu before sbatch, or set HPCGPU_PYTHON=" in err


def test_scancel_leaves_no_process_behind(slurm, tmp_path):
    job_id = sbatch(tmp_path, 1, 2, str(CHECK), "--marker", "started", "--sleep", "300")
    wait_for(lambda: (tmp_path / "started").exists() or slurm_finished(job_id), 180, 0.5,
             what="the script to start")
    marker = f"SLURM_JOB_ID={job_id}"
    running = processes_with(marker)
    assert len(running) >= 5, running  # batch shell's hpcgpu run, scheduler, srun, workers, script
    subprocess.run(["scancel", job_id], check=True, timeout=60)
    wait_for(lambda: slurm_finished(job_id), 120, 0.5, what=f"job {job_id} to end")
    wait_for(lambda: processes_with(marker) == [], 60, 0.5, what=f"the processes of job {job_id} to go")


# The allocation shapes sites document (docs/sites.md), each with and without -c, all
# submitted at once so that they run side by side on the 4 nodes. (shape options, how the
# script is started, workers expected; 0: refused before anything starts)
HPCGPU_RUN = f"{sys.executable} -m hpcgpu run --dashboard-address '' --timeout 240"
MPI = f"{sys.executable} -m hpcgpu.mpi --dashboard-address ''"
MATRIX = {
    "ntasks2-gpus-per-task": (["--ntasks=2", "--gpus-per-task=1"], HPCGPU_RUN, 2),
    "n2-ntasks-per-node2-gpus-per-task": (
        ["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"], HPCGPU_RUN, 4),
    "n2-gpus-per-node2": (["-N2", "--gpus-per-node=2", "--ntasks-per-node=1"], HPCGPU_RUN, 4),
    "gres-gpu2": (["--gres=gpu:2"], HPCGPU_RUN, 2),
    "n2-gpus3": (["-N2", "--gpus=3"], HPCGPU_RUN, 3),
    "exclusive": (["-N1", "--exclusive"], HPCGPU_RUN, 4),
    # hpcgpu run --launcher mpirun: its daemons must get every GPU of their node
    "run-mpirun-gpus-per-task": (["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"],
                                 f"{HPCGPU_RUN} --launcher mpirun", 4),
    "run-mpirun-n2-gpus3": (["-N2", "--gpus=3"], f"{HPCGPU_RUN} --launcher mpirun", 3),
    "mpirun-gpus-per-node": (["-N2", "--ntasks-per-node=2", "--gpus-per-node=2"],
                             f"mpirun -n 4 {MPI}", 4),
    "srun-pmix-gpus-per-task": (["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"],
                                f"srun --mpi=pmix {MPI}", 4),
    "mpirun-gpus-per-task-daemon-gpus": (
        ["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"],
        f"OMPI_MCA_plm_slurm_args=--gpus-per-node=2 mpirun -n 4 {MPI}", 4),
    # mpirun's daemons inherit --gpus-per-task=1: both ranks of a node would share a GPU
    "mpirun-gpus-per-task-refused": (["-N2", "--ntasks-per-node=2", "--gpus-per-task=1"],
                                     f"mpirun -n 4 {MPI}", 0),
    # 8 ranks on a node of 4 GPUs
    "mpirun-8-ranks-4-gpus-refused": (["-N1", "--ntasks=8", "--gpus-per-node=4"],
                                      f"mpirun -n 8 {MPI}", 0),
    # hpcgpu run started by srun, once per task
    "srun-hpcgpu-run-refused": (["--ntasks=2", "--gpus-per-task=1"], f"srun {HPCGPU_RUN}", 0),
}
REFUSALS = {"mpirun-gpus-per-task-refused": "would share GPU",
            "mpirun-8-ranks-4-gpus-refused": "two workers would share a GPU",
            "srun-hpcgpu-run-refused": "hpcgpu run is task"}
# A refusal is decided before any CPU count is read (from the task count, or the GPUs each
# rank sees), and the cases that run start mpirun and srun under -c2 too: the refused shapes
# run once, without -c.
CASES = [(shape, cpus) for shape in MATRIX for cpus in ("", "-c2")
         if not (cpus and shape in REFUSALS)]


@pytest.fixture(scope="module")
def matrix_jobs(slurm, tmp_path_factory, request):
    """Every selected case's (job id, directory), submitted before the first one is checked."""
    selected = {(item.callspec.params["shape"], item.callspec.params["cpus"])
                for item in request.session.items
                if getattr(item, "originalname", "") == "test_allocation_shape"}
    jobs = {}
    for shape, cpus in [case for case in CASES if case in selected]:
        options, start, expect = MATRIX[shape]
        directory = tmp_path_factory.mktemp(f"{shape}{cpus}")
        check = f"{CHECK} --expect {max(expect, 1)} --json r.json --exit-code 3"
        # --nice: the 25 jobs queue behind the other tests' jobs, not in front of them
        jobs[shape, cpus] = (sbatch_wrap(directory, ["--nice=10000", *options, *([cpus] if cpus else [])],
                                         f"{start} {check}", name=f"hpcgpu-shape{cpus}"), directory)
    yield jobs
    for job_id, _ in jobs.values():  # a failed test leaves nothing queued
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)


# One xdist worker runs every case: the fixture submits all selected cases, and in another
# worker it would submit them all again (each worker collects every item).
@pytest.mark.xdist_group("allocation-shapes")
@pytest.mark.parametrize("shape,cpus", CASES, ids=[f"{s}{c}" for s, c in CASES])
def test_allocation_shape(matrix_jobs, shape, cpus):
    job_id, directory = matrix_jobs[shape, cpus]
    expect = MATRIX[shape][2]
    # long enough to queue behind the other cases (and other users' jobs) on 2 cores
    state = wait_for(lambda: slurm_finished(job_id), 600, 1, what=f"job {job_id} ({shape}{cpus})")
    log = job_output(directory, f"{job_id}.*")
    wait_for(lambda: processes_with(f"SLURM_JOB_ID={job_id}") == [], 60, 0.5,
             what=f"the processes of job {job_id} to go")
    if expect == 0:
        assert state[0] == "FAILED" and state[1] != "3:0", log
        assert REFUSALS[shape] in log and "Traceback" not in log, log
        return
    assert state == ("FAILED", "3:0"), log  # the script's exit code is the job's
    result = json.loads((directory / "r.json").read_text())
    assert all(result["checks"].values()), result  # count, one GPU each, distinct GPUs
    places = [tuple(p) for p in result["places"].values()]
    assert len(places) == expect and len(set(places)) == expect, result
    if MATRIX[shape][1].startswith(HPCGPU_RUN):  # progress lines in the job's log (no terminal)
        full = (directory / f"{job_id}.out").read_text()
        assert f"{expect}/{expect} worker(s) connected after" in full, full[:3000]


FAILING_PRELOAD = '''
import os
if os.environ.get("SLURM_NODEID") == "1":
    raise ImportError("node 1 cannot start its worker (test)")
'''


def test_a_worker_that_cannot_start_ends_the_job_at_once_with_its_own_error(slurm, tmp_path):
    """One node's workers fail in their preload: srun ends the step, and hpcgpu run says
    so with the workers' own error within seconds, not after --timeout."""
    (tmp_path / "fails_on_node1.py").write_text(FAILING_PRELOAD)
    command = (f"PYTHONPATH={tmp_path}:$PYTHONPATH {HPCGPU_RUN} "
               f"--worker-args '--preload fails_on_node1' {CHECK} --expect 4")
    job_id = sbatch_wrap(tmp_path, ["-N2", "--ntasks-per-node=1", "--gpus-per-node=2"], command)
    wait_for(lambda: slurm_state(job_id)[0] not in ("PENDING", ""), 480, 0.2, what=f"job {job_id} to start")  # behind other tests' jobs
    started = time.monotonic()
    try:
        state = wait_for(lambda: slurm_finished(job_id), 120, 0.2, what=f"job {job_id} to end")
    except AssertionError as error:  # what the job said and which of its processes still run
        raise AssertionError(f"{error}: {slurm_state(job_id)}\n{job_output(tmp_path, f'{job_id}.*')[-6000:]}\n"
                             f"{processes_with(f'SLURM_JOB_ID={job_id}')}") from None
    took = time.monotonic() - started
    log = job_output(tmp_path, f"{job_id}.*")
    assert state[0] == "FAILED", log[-4000:]
    summary = log[log.index("hpcgpu run: error: the launcher exited"):]
    assert "worker(s) connected; the workers said:" in summary, log[-4000:]
    assert "ImportError: node 1 cannot start its worker (test)" in summary, log[-4000:]
    # the run's --timeout is 240 s: well before it (parallel CI on 2 cores slows start-ups)
    assert took < 120, (took, log[-4000:])
