"""A launcher that refuses hpcgpu's options says what to use instead: Open MPI's ``mpiexec``
has no ``--ppn`` (MPICH's, PALS' and Intel MPI's have), and ``jobscripts/pbs-2x4.pbs`` names
``mpiexec``; before, ``hpcgpu run`` ended with the launcher's words alone."""

from __future__ import annotations

import os
import subprocess
import sys

from hpcgpu.launchers import get_launcher

#: what Open MPI 4.1's mpiexec prints for --ppn (exit code 1)
OPEN_MPI = 'mpiexec: Error: unknown option "--ppn"\nType \'mpiexec --help\' for usage.\n'


def test_the_hint_names_mpirun_only_for_open_mpis_refusal():
    assert "--launcher mpirun" in get_launcher("mpiexec").failure_hint(OPEN_MPI)
    assert get_launcher("mpiexec").failure_hint("Killed\n") == ""
    assert get_launcher("srun").failure_hint(OPEN_MPI) == ""


def test_hpcgpu_run_says_it_when_mpiexec_is_open_mpis(tmp_path):
    fake = tmp_path / "bin" / "mpiexec"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nprintf '%s' '{OPEN_MPI}' >&2\nexit 1\n")
    fake.chmod(0o755)
    (tmp_path / "script.py").write_text("print('ran')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "SGE_", "LSB_"))}
    env.update(PATH=f"{fake.parent}{os.pathsep}{env['PATH']}", XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "hpcgpu", "run", "--launcher", "mpiexec",
                           "--gpus-per-node", "1", "--no-tls", "--timeout", "60", "script.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "ran" not in done.stdout, done.stderr[-3000:]
    assert "the launcher exited with code 1" in done.stderr, done.stderr[-3000:]
    assert "this mpiexec is Open MPI's" in done.stderr, done.stderr[-3000:]
