"""Drain signals and the fork server forked from the launcher (hpcgpu.worker.forkedserver):
a loopback scheduler, the real entry point; seconds, not a unit test's fraction of one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from distributed import Client, LocalCluster


def test_a_drain_signal_to_the_launcher_retires_its_forked_workers(tmp_path):
    """SIGUSR1 (SLURM's --signal before the walltime) reaches the workers forked from the
    server, not the server: each retires gracefully and the launcher ends cleanly."""
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, \
            Client(cluster) as client, open(tmp_path / "log", "w+") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu.worker", cluster.scheduler_address, "--name", "dr",
             "--gpus-per-node", "2", "--death-timeout", "30"],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", SLURM_JOB_ID=""), stderr=log)
        try:
            client.wait_for_workers(2, timeout=60)
            proc.send_signal(signal.SIGUSR1)
            assert proc.wait(30) == 0
        finally:
            proc.kill()
        log.seek(0)
        assert log.read().count("drain signal: retiring worker") == 2
