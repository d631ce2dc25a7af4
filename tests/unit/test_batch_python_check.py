"""jobscripts/'s batch scripts check their python first and say what to do (#43 item 2).

Each script runs under bash here, as its batch system would start it: without hpcgpu, it
must stop before anything else with the fix in its submit command's words, instead of
``/usr/bin/python3: No module named hpcgpu``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv

import pytest

from hpcgpu.jobspec.examples import BATCH_EXAMPLES

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
FIX = {"slurm": "before sbatch", "sge": "qsub -v HPCGPU_PYTHON=", "pbs": "qsub -V",
       "lsf": "before bsub"}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    # a python without hpcgpu: a fresh venv without pip (what /usr/bin/python3 is for a user)
    home = tmp_path_factory.mktemp("bare-venv")
    venv.create(home, with_pip=False)
    return str(home / "bin" / "python")


def run(filename, cwd, python):
    env = {k: v for k, v in os.environ.items() if k not in ("HPCGPU_SCRIPT", "PYTHONPATH")}
    env["HPCGPU_PYTHON"] = python
    return subprocess.run(["bash", str(ROOT / "jobscripts" / filename)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=60)


def test_each_batch_script_stops_first_and_says_what_to_do(bare_python, tmp_path):
    for filename, (scheduler, *_) in sorted(BATCH_EXAMPLES.items()):
        done = run(filename, tmp_path, bare_python)
        assert done.returncode == 2, (filename, done.stderr)
        assert f"hpcgpu: {bare_python} ({bare_python}) on " in done.stderr, (filename, done.stderr)
        assert FIX[scheduler] in done.stderr and "HPCGPU_PYTHON" in done.stderr, (filename, done.stderr)
        assert "HPCGPU_SCRIPT" not in done.stderr  # nothing after the check ran


def test_a_python_that_is_not_there_is_named(tmp_path):
    done = run("slurm-2x4.sbatch", tmp_path, str(tmp_path / "no-such-python"))
    assert done.returncode == 2
    assert f"{tmp_path}/no-such-python (not found) on " in done.stderr, done.stderr


def test_hpcgpus_source_folder_alone_does_not_pass(bare_python):
    # run from the repository: the bare python finds hpcgpu there, not its dependencies
    assert run("slurm-2x4.sbatch", ROOT, bare_python).returncode == 2


def test_the_python_that_has_hpcgpu_passes_the_check(tmp_path):
    done = run("slurm-2x4.sbatch", tmp_path, sys.executable)
    # the next line stops it: no script named
    assert done.returncode != 0 and "name the script to run" in done.stderr, done.stderr
    assert "has no hpcgpu" not in done.stderr


def test_worker_jobs_check_their_python_after_the_users_prologue(bare_python, tmp_path):
    from hpcgpu.jobspec.dialects import get_dialect
    from hpcgpu.jobspec.launchers import get_launcher
    from hpcgpu.jobspec.render import python_check, render, worker_job_script
    from hpcgpu.jobspec.resources import GPUJobShape
    from hpcgpu.jobspec.worker_command import WorkerCommand

    script = render(worker_job_script(
        GPUJobShape.create(gpus_per_node=1), get_dialect("slurm"), get_launcher("srun"),
        WorkerCommand(scheduler="tls://10.0.0.1:8786"), python=bare_python,
        job_script_prologue=("module load python",), start_lines=("start-the-scheduler &",)))
    check = "\n".join(python_check(bare_python))
    # a module load or an activation may be what gives the nodes their python; the
    # scheduler of scheduler_in_job is the first thing that needs it
    assert f"module load python\n{check}\nstart-the-scheduler &\n" in script, script
    passed = subprocess.run(["bash", "-c", "\n".join(python_check(sys.executable))], capture_output=True,
                            text=True, cwd=tmp_path, timeout=60)
    assert passed.returncode == 0 and not passed.stderr, passed.stderr
    done = subprocess.run(["bash", "-c", "\n".join(python_check(bare_python))], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert f"hpcgpu: {bare_python} ({bare_python}) on " in done.stderr, done.stderr
    assert "has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=" in done.stderr
