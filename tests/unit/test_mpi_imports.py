"""``mpirun python -m hpcgpu.mpi`` refuses a layout where ranks would share a GPU before
any rank imports distributed (about 0.85 CPU-s per rank): what runs up to that check
imports none of it."""

from __future__ import annotations

import subprocess
import sys


def test_the_bootstrap_reaches_its_gpu_check_without_distributed():
    code = ("import sys, hpcgpu.mpi.__main__, hpcgpu.mpi.core as core; assert core.check_gpus; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'distributed'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
