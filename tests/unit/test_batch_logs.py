"""The three batch modes, each with a user's script that leaves its client open: the
dashboard listens on 127.0.0.1 only and the log gives its link (dask's
``distributed.dashboard.link`` template) and how to reach it (``ssh -L``); a clean
run's log holds no traceback, a failed one exactly the user's.

``hpcgpu run`` (direct launcher) and ``mpirun -n 2 python -m hpcgpu.mpi`` run here with
fake GPU ids; ``GPURunner`` under ``srun -n 2`` on the real local SLURM.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from batchtools import OMPI_ROOT

SCRIPT = Path(__file__).parents[1] / "batch_user_script.py"
MODES = {
    "run": ([sys.executable, "-m", "hpcgpu", "run", "--grace", "5", str(SCRIPT)], "0"),
    "mpi": (["mpirun", "--oversubscribe", "-n", "2", sys.executable, "-m", "hpcgpu.mpi",
             str(SCRIPT)], "0,1"),
    "runner": (["srun", "--ntasks=2", "--gpus-per-task=1", "--cpus-per-task=1", "--mem=2G",
                "--time=5", "--job-name=hpcgpu-logs-test", sys.executable, str(SCRIPT)], None),
}


def run_mode(mode: str, tmp_path: Path, *extra: str, **more_env: str) -> tuple[subprocess.CompletedProcess, dict]:
    argv, gpus = MODES[mode]
    out = str(tmp_path / "out.json")
    argv = [*argv, out, *(["--runner"] if mode == "runner" else []), *extra]
    env = dict(os.environ, **OMPI_ROOT, **more_env)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    result = json.loads(Path(out).read_text()) if Path(out).exists() else {}
    return done, result


@pytest.fixture(params=list(MODES))
def mode(request):
    if request.param == "runner":
        request.getfixturevalue("slurm")
    return request.param


def test_a_clean_run_has_no_traceback_and_a_local_dashboard(mode, tmp_path):
    # a JupyterHub-like link template: every mode's message follows it, as dashboard_link does
    done, result = run_mode(mode, tmp_path, DASK_DISTRIBUTED__DASHBOARD__LINK="/user/{USER}/proxy/{port}/status",
                            USER="hubuser")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    assert "Traceback" not in log, log[-8000:]
    port = result["port"]
    assert result["listening"] == ["127.0.0.1"], result
    host = socket.gethostname()
    assert f"dashboard: /user/hubuser/proxy/{port}/status on {host} (this node only" in log, log[-5000:]
    assert f"ssh -L {port}:localhost:{port} {host}, then open http://localhost:{port}/status" in log, log[-5000:]


def test_a_failed_run_has_exactly_the_users_traceback(mode, tmp_path):
    done, _ = run_mode(mode, tmp_path, "--fail")
    log = done.stdout + done.stderr
    assert done.returncode == 1, log[-5000:]
    assert log.count("Traceback") == 1, log[-8000:]
    assert "RuntimeError: the user's own error" in log, log[-5000:]
