"""Batch mode over UCX on the real local SLURM: ``sbatch jobscripts/slurm-2x4.sbatch
--protocol ucx ...`` (2 fake nodes x 1 GPU, UCX over TCP on loopback)."""

from __future__ import annotations

import re

import pytest

from batchtools import ROOT, job_output, slurm_finished
from conftest import wait_for
from test_batch_slurm import sbatch
from ucx_marks import needs_ucx

pytestmark = [pytest.mark.slurm, needs_ucx]


def ucx_batch(tmp_path, protocol: str, script: str) -> str:
    """The output of ``hpcgpu run --protocol <protocol> tests/<script>`` on 2 fake nodes x 1
    GPU over loopback, once the job completed with exit code 0."""
    job_id = sbatch(tmp_path, 2, 1, "--protocol", protocol, "--interface", "lo",
                    "--dashboard-address", "", str(ROOT / "tests" / script))
    state = wait_for(lambda: slurm_finished(job_id), 180, 0.5, what=f"job {job_id}")
    text = job_output(tmp_path, f"{job_id}.*")
    assert state == ("COMPLETED", "0:0"), text[-4000:]
    return text


def test_sbatch_hpcgpu_run_protocol_ucx(slurm, tmp_path):
    text = ucx_batch(tmp_path, "ucx", "ucx_batch_script.py")
    assert "hpcgpu run: scheduler ucx://127.0.0.1:" in text
    assert "RESULT ucx://127.0.0.1:" in text
    # No heartbeat into a closed scheduler: the workers went first (issue 15).
    # ucxx's own listener logs a traceback when a peer resets a connection during the UCX
    # handshake (seen once in 12 loaded CI runs, as the script's client closed): upstream
    # logging, not hpcgpu's heartbeats; any other traceback fails.
    own = re.sub(r"UCXPY  ERROR Unexpected error in listener handler coroutine\n"
                 r"(?:.*\n)*?.*UCXXConnectionResetError: [^\n]*Connection reset by remote peer\n",
                 "", text)
    assert "End worker" in text and "Traceback" not in own, text[-5000:]


def test_hpcgpu_run_without_ucx_fails_before_starting(tmp_path, monkeypatch):
    """The same command where UCX cannot load: a clear error, nothing started (a
    fallback is opt-in).

    In this process, through click's runner: as a fresh interpreter (about 1.6 s of imports
    here: dask, distributed, distributed-ucxx, RMM) it had not printed its error 45 s after its
    start in two CI runs, while the UCX group's first jobs kept the 2 cores at a load of ~38."""
    from click.testing import CliRunner

    from hpcgpu.cli import main

    monkeypatch.setattr("hpcgpu.network.availability.ucx_unavailable_reason", lambda: "no UCX here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    done = CliRunner().invoke(main, ["run", "--protocol", "ucx", "--launcher", "direct",
                                     "--gpus-per-node", "1", "x.py"])
    assert done.exit_code == 1, done.output
    assert "protocol='ucx' was requested but no UCX here" in done.output
    assert "pip install 'hpcgpu[ucx]'" in done.output
    assert not (tmp_path / "cache").exists()  # refused before the job directory was made
