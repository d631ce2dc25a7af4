"""SLURM's own output, read by hpcgpu's parsers: captured on SLURM 22.05, derived from the
source and man pages of 24.11 / 25.11 (tests/data/README.md says which file is which).

Expected values are what a person reads in the fixture, not what the parser returns.
"""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from hpcgpu.system import commands
from hpcgpu.jobspec.dialects.base import JOB_STATES
from hpcgpu.jobspec.dialects.slurm import SlurmDialect, expand_hostlist
from hpcgpu.worker.hostmemory import gpu_workers_on_host
from hpcgpu.worker.walltime import _slurm_end

DATA = Path(__file__).parents[1] / "data"
SLURM = SlurmDialect()
#: the array indices of the sparse held array in slurm-22.05-squeue-sparse-array*.txt: the
#: primes between 100 and 260 (``sbatch --hold --array=101,103,...,257``)
PRIMES = [n for n in range(100, 260) if all(n % d for d in range(2, n))]


def _read(name: str) -> str:
    return (DATA / name).read_text()


def _states(name: str) -> dict[str, tuple[str, tuple[str, ...], str]]:
    return {k: (s.state, s.nodes, s.reason) for k, s in SLURM.parse_status(_read(name)).items()}


# --------------------------------------------------------------- squeue, SLURM 22.05 (captured)
def test_squeue_of_a_mixed_queue_on_slurm_22_05():
    assert _states("slurm-22.05-squeue-mixed.txt") == {
        "252": ("completed", ("node1",), "None"),
        "253": ("failed", ("node1",), "NonZeroExitCode"),
        "254": ("failed", ("node1",), "JobLaunchFailure"),  # the batch shell killed itself (-9)
        # 257_[2-5%2]: four elements waiting for the throttle of 2
        **{f"257_{i}": ("pending", (), "JobArrayTaskLimit") for i in range(2, 6)},
        "251": ("pending", (), "JobHeldUser"),              # sbatch --hold
        "255": ("running", ("node1", "node2"), "None"),     # -N2: node[1-2]
        "256": ("running", ("node1",), "None"),
        "257_0": ("running", ("node1",), "None"),
        "257_1": ("running", ("node1",), "None"),
        "258": ("running", ("node1",), "None"),
    }


def test_squeue_of_ended_jobs_on_slurm_22_05():
    states = _states("slurm-22.05-squeue-ended.txt")
    assert states["258"][0] == "cancelled"
    assert states["255"] == ("completed", ("node1", "node2"), "None")
    assert states["256"] == ("failed", ("node1",), "TimeLimit")  # TIMEOUT
    assert {k for k, v in states.items() if v[0] == "failed"} == {
        "253", "254", "256", "257_1", "257_2", "257_3", "257_4", "257_5"}
    assert states["251"][0] == "pending"


def test_a_sigstopped_job_is_still_running():
    # scancel --signal=STOP: squeue says STOPPED; the job keeps its nodes and its walltime
    # runs on. hpcgpu read it as "failed" and replaced a job that still held two nodes.
    status = SLURM.parse_status(_read("slurm-22.05-squeue-stopped.txt"))["255"]
    assert (status.state, status.nodes, status.finished) == ("running", ("node1", "node2"), False)


def test_squeue_cuts_a_sparse_arrays_pending_elements_short():
    # 30 held elements, one line, cut at 31 characters: 13 is no element of the array
    text = _read("slurm-22.05-squeue-sparse-array.txt")
    assert text.split("|")[0] == "271_[101,103,107,109,113,127,13"
    with pytest.raises(ValueError, match="--array"):
        SLURM.parse_status(text)


def test_squeue_array_lists_every_element_of_a_sparse_array():
    states = _states("slurm-22.05-squeue-sparse-array-r.txt")
    assert states == {f"271_{p}": ("pending", (), "JobHeldUser") for p in PRIMES}


@pytest.mark.slurm
def test_the_status_command_reports_every_element_of_a_sparse_array(slurm, tmp_path):
    indices = ",".join(map(str, PRIMES))
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--hold", "-J", "hpcgpu-sparse", f"--array={indices}",
         f"--output={tmp_path}/%A_%a.out", "--wrap", "true"],
        capture_output=True, text=True, check=True)
    array_id = SLURM.parse_job_id(submitted.stdout)
    try:
        done = commands.run(SLURM.status_argv([array_id]), timeout=30)
        states = {k: s.state for k, s in SLURM.parse_status(done.stdout).items()}
    finally:
        subprocess.run(["scancel", array_id], check=False)
    assert states == {f"{array_id}_{p}": "pending" for p in PRIMES}


# ------------------------------------------ squeue, SLURM 24.11 / 25.11 (derived, not captured)
def test_every_job_state_of_slurm_24_11():
    # squeue(1) JOB STATE CODES, SLURM 24.11: what each name means for the job's nodes
    still_pending = {"401", "402", "407", "410", "411", "412", "413", "414"}
    holds_its_nodes = {"403", "404", "405", "406"}   # RUNNING RESIZING SIGNALING STOPPED
    ending = {"408", "409"}                          # COMPLETING STAGE_OUT
    ended_badly = {"418", "419", "420", "421", "422", "423", "424"}
    states = {k: s.state for k, s in SLURM.parse_status(
        _read("slurm-24.11-squeue-states.derived.txt")).items()}
    assert len(states) == 24 and set(states.values()) <= set(JOB_STATES) - {"unknown"}
    assert {k for k, v in states.items() if v == "pending"} == still_pending
    assert {k for k, v in states.items() if v == "running"} == holds_its_nodes
    assert {k for k, v in states.items() if v == "completing"} == ending
    assert {k for k, v in states.items() if v == "failed"} == ended_badly
    assert (states["415"], states["416"], states["417"]) == ("completed", "cancelled", "cancelled")


def test_a_state_a_newer_slurm_adds_is_not_a_failure():
    # 25.11 adds EXPEDITING (a failed job being checked for an expedited requeue)
    expediting = SLURM.parse_status(_read("slurm-25.11-squeue-expediting.derived.txt"))["501"]
    assert not expediting.finished
    later = SLURM.parse_status("601|SOME_FUTURE_STATE|gpu01|None")["601"]
    assert (later.state, later.finished) == ("unknown", False)


# ----------------------------------------------------------------------- scontrol show job
@pytest.mark.parametrize("name, code", [
    ("slurm-22.05-scontrol-show-job-timeout.txt", 128 + 15),    # ExitCode=0:15 (SIGTERM)
    ("slurm-22.05-scontrol-show-job-killed.txt", 128 + 9),      # ExitCode=0:9
    ("slurm-22.05-scontrol-show-job-cancelled.txt", 128 + 15),  # ExitCode=0:15
    ("slurm-22.05-scontrol-show-job-array-element.txt", 3),     # 257_3: exit $SLURM_ARRAY_TASK_ID
    ("slurm-24.11-scontrol-show-job-oom.derived.txt", 253),     # 0:125, SLURM's SIG_OOM 253
])
def test_exit_code_from_scontrol_show_job(name, code):
    assert SLURM.parse_exit_code(_read(name)) == code


@pytest.mark.parametrize("name, nodes", [
    ("slurm-22.05-scontrol-show-job-failed.txt", ("node3",)),  # ReqNodeList=(null) before it
    ("slurm-22.05-scontrol-show-job-requeued.txt", ()),        # ReqNodeList=node2, NodeList= empty
    ("slurm-22.05-scontrol-show-job-pending.txt", ()),
])
def test_nodes_of_an_ended_job_from_scontrol_show_job(name, nodes):
    assert SLURM.parse_end_nodes(_read(name)) == nodes


def test_scontrol_of_an_array_element_is_that_element():
    text = _read("slurm-22.05-scontrol-show-job-array-element.txt")
    assert "ArrayJobId=257 ArrayTaskId=3" in text and "JobState=FAILED" in text


# ---------------------------------------------------------------- sbatch --parsable, squeue %e
def test_sbatch_parsable_of_an_array_is_its_array_id():
    assert SLURM.parse_job_id(_read("slurm-22.05-sbatch-parsable-array.txt")) == "257"
    # sbatch(1), 24.11, --parsable: "the job id number and the cluster name if present,
    # separated by a semicolon"
    assert SLURM.parse_job_id("4242;gpucluster\n") == "4242"


def test_job_end_time_from_squeue(monkeypatch):
    running, held = _read("slurm-22.05-squeue-endtime.txt").splitlines()
    for line, expected in ((running, datetime(2026, 11, 23, 6, 38, 36).timestamp()), (held, None)):
        monkeypatch.setattr(commands, "runner",
                            lambda argv, timeout, input, line=line:
                            commands.CommandResult(tuple(argv), 0, line + "\n", ""))
        assert _slurm_end("255") == expected


# ------------------------------------------------------------- host lists, tasks per node
def _compress(prefix: str, numbers: list[int], width: int) -> str:
    """``node[01-03,07]`` the way SLURM's hostlist_ranged_string writes sorted numbers."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    if len(numbers) == 1:
        return f"{prefix}{numbers[0]:0{width}d}"
    parts = [f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs]
    return f"{prefix}[{','.join(parts)}]"


_prefixes = st.sampled_from(["node", "gpu", "nid", "rack1-n", "a100-", "x"])


@given(st.lists(st.tuples(_prefixes, st.sets(st.integers(0, 300), min_size=1, max_size=12),
                          st.integers(1, 4)), min_size=1, max_size=4, unique_by=lambda t: t[0]))
def test_hostlist_round_trips_slurms_compression(groups):
    hosts, parts = [], []
    for prefix, numbers, width in groups:
        numbers = sorted(numbers)
        hosts += [f"{prefix}{n:0{width}d}" for n in numbers]
        parts.append(_compress(prefix, numbers, width))
    assert expand_hostlist(",".join(parts)) == tuple(hosts)


def test_hostlists_seen_in_real_output():
    assert expand_hostlist("node[01-04,07]") == ("node01", "node02", "node03", "node04", "node07")
    assert expand_hostlist("node[9-10]") == ("node9", "node10")
    assert expand_hostlist("node[1-2]") == ("node1", "node2")  # slurm-22.05-squeue-mixed.txt


@given(st.lists(st.tuples(st.integers(1, 128), st.integers(1, 9)), min_size=1, max_size=5))
def test_tasks_on_this_host_from_slurm_ntasks_per_node(groups):
    # SLURM_TASKS_PER_NODE / SLURM_NTASKS_PER_NODE: counts compressed as 4(x3),2
    text = ",".join(f"{c}(x{k})" if k > 1 else str(c) for c, k in groups)
    assert gpu_workers_on_host({"SLURM_NTASKS_PER_NODE": text}) == groups[0][0]
