"""Batch-mode mistakes refused with a message that says what to do, before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, strategies as st

from hpcgpu.cli import main
from hpcgpu.runner.options import BatchOptions

HIDDEN = '''raise ModuleNotFoundError("No module named 'mpi4py'", name="mpi4py")\n'''


def test_mpi_without_mpi4py_names_the_extra(tmp_path):
    (tmp_path / "mpi4py.py").write_text(HIDDEN)  # mpi4py not installed, as far as Python sees
    (tmp_path / "app.py").write_text("print('ran')\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-m", "hpcgpu.mpi", "app.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "pip install 'hpcgpu[mpi]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "ran" not in done.stdout, done.stderr


@pytest.mark.parametrize("args, says", [
    (["--timeout", "-1"], "--timeout -1: seconds to wait for --min-workers; more than 0"),
    (["--timeout", "0"], "--timeout 0: seconds to wait for --min-workers; more than 0"),
    (["--gpus-per-node", "0"], "--gpus-per-node 0: every worker needs a GPU"),
    (["--nodes", "0"], "--nodes 0: nodes to use; 1 or more"),
    (["--min-workers", "0"], "--min-workers 0: workers to wait for"),
    (["--nthreads", "0"], "--nthreads 0: threads per worker"),
    (["--grace", "-5"], "--grace -5: seconds processes get to stop"),
])
def test_hpcgpu_run_refuses_numbers_it_cannot_use(tmp_path, args, says):
    with CliRunner().isolated_filesystem(temp_dir=tmp_path):
        result = CliRunner().invoke(main, ["run", *args, "app.py"],
                                    env={"CUDA_VISIBLE_DEVICES": "0",
                                         "XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert result.exit_code == 2, result.output
        assert says in result.output, result.output
        assert not os.path.exists(tmp_path / "cache")  # refused before anything started


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_timeout_is_a_finite_positive_number(value):
    if value > 0 and value != float("inf"):
        assert BatchOptions("a.py", timeout=value).timeout == value
    else:
        with pytest.raises(ValueError, match="--timeout"):
            BatchOptions("a.py", timeout=value)
