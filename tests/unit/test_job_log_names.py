"""``hpcgpu logs JOB_ID`` finds a job's files by the id the scheduler printed: a job's, an
array's (every element) or one element's, on SLURM, Grid Engine and PBS (with or without the
server's name), and never another job's (hpcgpu.system.joblogs.job_files)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hpcgpu.system.joblogs import job_files

ids = st.integers(1, 10**7)
servers = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)


def slurm(job: int, elements: list[int]) -> list[str]:
    tags = [f"{job}_{i}" for i in elements] or [str(job)]
    return [f"hpcgpu-{t}.{s}" for t in tags for s in ("out", "err")]


def pbs(job: int, elements: list[int], server: str) -> list[str]:
    tags = [f"{job}[{i}]" for i in elements] or [str(job)]
    return [f"{t}.{server}.{s}" for t in tags for s in ("OU", "ER")]


def sge(job: int, elements: list[int]) -> list[str]:
    return [f"hpcgpu.o{job}" + (f".{i}" if i is not None else "") for i in elements or [None]]


@given(ids, ids, st.lists(st.integers(0, 99), unique=True, max_size=4), servers)
def test_a_jobs_or_arrays_id_finds_its_files_and_no_other_jobs(job, other, elements, server):
    if str(other) == str(job):
        other += 1
    mine = {"slurm": slurm(job, elements), "pbs": pbs(job, elements, server), "sge": sge(job, elements)}
    theirs = slurm(other, elements) + pbs(other, elements, server) + sge(other, elements)
    names = sorted(theirs + [n for files in mine.values() for n in files])
    found = job_files(names, str(job))
    assert sorted(found) == sorted(n for files in mine.values() for n in files)
    assert sorted(job_files(names, f"{job}[].{server}" if elements else f"{job}.{server}")) == sorted(mine["pbs"])
    for i in elements:  # one element, as squeue and qstat print it
        assert sorted(job_files(names, f"{job}_{i}")) == sorted(n for n in mine["slurm"] if f"_{i}." in n)
        assert sorted(job_files(names, f"{job}[{i}]")) == sorted(n for n in mine["pbs"] if f"[{i}]" in n)
