"""Grid Engine 8.1.9's own output (captured here; tests/data/README.md), read by the SGE
dialect: plain ``qstat -u '*'``, ``qacct -j`` and ``qsub -terse``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcgpu.jobspec.dialects.sge import SGEDialect

DATA = Path(__file__).parents[1] / "data"
SGE = SGEDialect()


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_qstat_with_a_pe_job_a_held_job_and_a_throttled_array():
    states = {k: (s.state, s.nodes) for k, s in SGE.parse_status(_read("sge-8.1.9-qstat.txt")).items()}
    assert states == {
        "40": ("running", ("vm",)),        # -pe smp 2, no ja-task-ID (trailing blanks)
        "41.1": ("running", ("vm",)),
        "41.2": ("running", ("vm",)),
        "37": ("pending", ()),             # qsub -h: hqw
        "41.3": ("pending", ()),           # -tc 2: the rest wait as "3,4"
        "41.4": ("pending", ()),
    }


def test_qstat_of_a_job_being_deleted():
    status = SGE.parse_status(_read("sge-8.1.9-qstat-deleting.txt"))["40"]
    assert (status.state, status.reason) == ("cancelled", "dr")


@pytest.mark.parametrize("name, code", [
    ("sge-8.1.9-qacct-exit5.txt", 5),          # the script's exit 5
    ("sge-8.1.9-qacct-qdel.txt", 137),         # qdel of a running job: "137 (Killed)"
    ("sge-8.1.9-qacct-array-task.txt", 0),     # qacct -j 41 -t 2
])
def test_exit_code_from_qacct(name, code):
    assert SGE.parse_exit_code(_read(name)) == code
    assert SGE.parse_end_nodes(_read(name)) == ("vm",)  # where it ran, for a job no poll saw running


def test_qacct_argv_of_an_array_element_names_its_task():
    assert SGE.exit_code_argv("41.2") == ["qacct", "-j", "41", "-t", "2"]
    assert "taskid       2" in _read("sge-8.1.9-qacct-array-task.txt")


def test_qsub_terse_of_a_plain_job():
    assert SGE.parse_job_id(_read("sge-8.1.9-qsub-terse.txt")) == "37"
