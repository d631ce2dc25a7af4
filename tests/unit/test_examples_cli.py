"""``python -m hpcgpu.jobspec.examples``: the regeneration command writes where it is told."""

import subprocess
import sys

from click.testing import CliRunner

from hpcgpu.jobspec.examples import BATCH_EXAMPLES, EXAMPLES, main


def test_help_is_help_not_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "ROOT" in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_cluster_folder_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["jobscripts/cluster"])
    assert result.exit_code == 2 and "--kind cluster" in result.output
    assert list(tmp_path.iterdir()) == []


def test_kinds_write_into_the_folder_given(tmp_path):
    result = CliRunner().invoke(main, ["--kind", "cluster", str(tmp_path / "cluster")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "cluster").iterdir()) == sorted(EXAMPLES)
    result = CliRunner().invoke(main, [str(tmp_path / "all")])
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == sorted([*BATCH_EXAMPLES, "cluster"])


def test_python_dash_m_runs_the_command(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hpcgpu.jobspec.examples", "--kind", "batch", "out"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(BATCH_EXAMPLES)
