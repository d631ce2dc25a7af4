"""SLURM accounts with spaces (#38 "validate less, quote more"): sbatch reads a directive's
quotes as bash does (OpenPBS's qsub too), so hpcgpu writes such an account shlex-quoted; the schedulers whose
directive lines hpcgpu does not quote refuse a space, naming the account and the characters
it may hold. The real sbatch's reading is tests/integration/test_directive_parse.py."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.cluster.batch.setup import prepare
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import JobScript, render
from hpcgpu.jobspec.resources import GPUJobShape

WORD = r"[A-Za-z0-9_.:@+=,/-]{1,6}"
SPACED = st.from_regex(rf"{WORD}( {{1,3}}{WORD}){{1,3}}", fullmatch=True)


def _script(scheduler: str, account: str) -> str:
    dialect = get_dialect(scheduler)
    shape = GPUJobShape.create(gpus_per_node=1, walltime="00:05:00", account=account)
    return render(JobScript(shape, dialect, get_launcher(dialect.default_launcher), "true"))


#: scheduler -> the start of its account directive, and how shlex splits the line
QUOTING = {"slurm": ("#SBATCH --account", lambda a: ["#SBATCH", f"--account={a}"]),
           "pbs": ("#PBS -A", lambda a: ["#PBS", "-A", a])}


def _account_lines(scheduler: str, text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(QUOTING[scheduler][0])]


@settings(max_examples=50, deadline=None)
@given(scheduler=st.sampled_from(sorted(QUOTING)), account=SPACED)
def test_an_account_with_spaces_is_written_as_one_quoted_word(scheduler, account):
    (line,) = _account_lines(scheduler, _script(scheduler, account))
    assert shlex.split(line) == QUOTING[scheduler][1](account)


@pytest.mark.parametrize("scheduler", sorted(QUOTING))
def test_a_plain_account_is_written_as_before(scheduler):
    (line,) = _account_lines(scheduler, _script(scheduler, "proj123"))
    assert line.endswith(("=proj123", " proj123")) and "'" not in line


@pytest.mark.parametrize("scheduler", ["sge", "lsf", "flux"])
def test_schedulers_that_split_directives_refuse_a_space_naming_the_account(scheduler):
    with pytest.raises(ValueError, match=r"account='Dask On HPC' holds (a space|' ').*letters, digits"):
        _script(scheduler, "Dask On HPC")


@pytest.mark.parametrize("account", ['a"b', "a'b", "a\\b", "a$b", "a`id`", "a\nb", " a", "a ", "a;b", "a#b"])
@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
def test_accounts_that_could_leave_their_word_are_refused(scheduler, account):
    with pytest.raises(ValueError, match=r"account=.*letters, digits"):
        _script(scheduler, account)


def test_a_cluster_takes_an_account_with_spaces_where_it_is_quoted(tmp_path):
    setup = prepare("slurm", {"gpus_per_node": 1, "account": "Dask On SLURM",
                              "log_directory": str(tmp_path)})
    assert setup.shape.account == "Dask On SLURM"
    with pytest.raises(ValueError, match="account='Dask On SGE'"):
        prepare("sge", {"gpus_per_node": 1, "account": "Dask On SGE", "log_directory": str(tmp_path)})
