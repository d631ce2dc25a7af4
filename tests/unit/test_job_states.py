"""A job's states alone: the transition table, the one writer (JobFleet.apply), strict and
lenient handling of a move not allowed, and random sequences of events (hypothesis state
machines): raw events against the table, and the monitor, walltime planner and submitter fed
random scheduler answers, worker connections and scale requests, strict all along."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from types import SimpleNamespace

import dask
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_cluster_parts import FakeJob, fleet_of, monitor_of, pool, submitter_of

from hpcgpu.cluster.batch.job_events import (Cancelling, Connected, Ended, Requeued, RetireNow,
                                             Retiring, Seen, SubmitFailed, Submitted)
from hpcgpu.cluster.batch.job_state import LIVE, TRANSITIONS, JobState, JobStateError, move
from hpcgpu.cluster.batch.job_table import JobRecord
from hpcgpu.cluster.batch.walltime_planner import WalltimePlanner
from hpcgpu.jobspec.walltime import Retirement
from hpcgpu.system.commands import CommandResult, set_runner

S = JobState
#: What the job table may show.
SHOWN = {"submitting", "pending", "running", "retiring", "completing", "completed", "failed",
         "cancelled", "unknown"}
SCHEDULER_WORDS = ("pending", "running", "completing", "completed", "failed", "cancelled",
                   "unknown")
NOT_RUNNING = tuple(word for word in SCHEDULER_WORDS if word != "running")


# ---------------------------------------------------------------------- the table
def test_over_is_over_and_every_live_state_can_end():
    for state in S:
        out = {after for (before, _), after in TRANSITIONS.items() if before is state}
        if state.terminal:
            assert out == set(), state
        else:
            assert any(after.terminal for after in out), state
    assert {after for (before, _), after in TRANSITIONS.items() if before is S.SUBMITTED} == {
        S.PENDING, S.RUNNING, S.FAILED}
    # a job never goes back to its queue's first wait, nor to submitted
    assert all(after not in (S.SUBMITTED, S.PENDING) or before in (S.SUBMITTED, after)
               for (before, _), after in TRANSITIONS.items())


def test_a_move_not_allowed_raises_when_strict_and_warns_with_the_job_id_otherwise(caplog):
    with pytest.raises(JobStateError, match=r"job c-3 \(id 42\): 'seen' is not allowed in "
                                            r"state 'failed'"):
        move("c-3", "42", S.FAILED, "seen")
    with dask.config.set({"hpcgpu.cluster.strict-job-states": False}):
        with caplog.at_level(logging.WARNING, logger="hpcgpu.cluster"):
            assert move("c-3", "42", S.FAILED, "seen") is S.FAILED
    (message,) = caplog.messages
    assert message.startswith("job c-3 (id 42): 'seen' is not allowed in state 'failed'")


def test_strict_apply_changes_nothing_and_lenient_apply_keeps_the_state(tmp_path):
    fleet = fleet_of(pool(tmp_path))
    fleet.grow(1)
    fleet.new_record("c-0")
    before = dict(fleet.records), dict(fleet.spec)
    with pytest.raises(JobStateError, match="'walltime near' is not allowed in state 'submitted'"):
        fleet.apply(Retiring("c-0"))
    assert (dict(fleet.records), dict(fleet.spec)) == before
    with dask.config.set({"hpcgpu.cluster.strict-job-states": False}):
        fleet.apply(Ended("c-0", S.FAILED, exit_code=2))
    record = fleet.records["c-0"]
    assert record.phase is S.SUBMITTED and record.exit_code == 2 and "c-0" not in fleet.spec


def test_the_fleet_alone_writes_records(tmp_path):
    fleet = fleet_of(pool(tmp_path))
    fleet.grow(1)
    fleet.new_record("c-0")
    with pytest.raises(TypeError):
        fleet.records["c-0"] = JobRecord("c-0", 2, phase=S.RUNNING)  # a read-only view
    with pytest.raises(AttributeError):
        fleet.records["c-0"].phase = S.RUNNING  # frozen
    assert fleet.records["c-0"].phase is S.SUBMITTED


def test_the_job_table_shows_the_same_words_as_before(tmp_path):
    fleet = fleet_of(pool(tmp_path))
    fleet.grow(1)
    fleet.new_record("c-0")
    shown = [fleet.table()[0].state]
    for event in (Submitted("c-0", SimpleNamespace(job_id="5")), Seen("c-0", "running", at=0.0),
                  Retiring("c-0"), Seen("c-0", "completing"), Seen("c-0", "completed"),
                  Ended("c-0", S.ENDED)):
        fleet.apply(event)
        shown.append(fleet.table()[0].state)
    assert shown == ["submitting", "pending", "running", "retiring", "completing", "completed",
                     "completed"]


# ---------------------------------------------------------------------- raw events
#: one kind of event per label of the table (and the flag that moves nothing)
_KINDS = ("submitted", "submit failed", "seen", "seen running", "connected", "requeued",
          "requeued, cancelled", "walltime near", "retired now", "cancelling", "ended",
          "cancelled", "failed")


def _event(name: str, kind: str, word: str = "pending", nodes: tuple = (), workers: int = 2,
           job_id: str = "3"):
    """An event of ``kind`` for job ``name`` (``word``: the scheduler's, when seen not running)."""
    return {
        "submitted": lambda: Submitted(name, SimpleNamespace(job_id=job_id)),
        "submit failed": lambda: SubmitFailed(name, "refused"),
        "seen": lambda: Seen(name, word, nodes),
        "seen running": lambda: Seen(name, "running", ("n1",)),
        "connected": lambda: Connected(name, frozenset(f"{name}-0-{i}" for i in range(workers))),
        "requeued": lambda: Requeued(name, keep=True),
        "requeued, cancelled": lambda: Requeued(name, keep=False),
        "walltime near": lambda: Retiring(name, "near"), "retired now": lambda: RetireNow(name),
        "cancelling": lambda: Cancelling(name),
        **{end: (lambda end=end: Ended(name, JobState(end))) for end in ("ended", "cancelled", "failed")},
    }[kind]()


def _drawn_event(name: str, kind: str, data) -> object:
    """:func:`_event` with its details drawn by hypothesis (only those its kind uses)."""
    if kind == "seen":
        return _event(name, kind, data.draw(st.sampled_from(NOT_RUNNING)),
                      data.draw(st.sampled_from([(), ("n1",)])))
    if kind == "connected":
        return _event(name, kind, workers=data.draw(st.integers(0, 3)))
    return _event(name, kind)


def test_every_event_in_every_state_moves_as_the_table_says_or_raises(tmp_path):
    """All states x all kinds of event, each from a fresh record: the table's move, or
    JobStateError and nothing changed; every move of the table is made."""
    made = set()
    for state, kind in itertools.product(S, _KINDS):
        word = "submitting" if state is S.SUBMITTED else state.word if state.terminal else "pending"
        fleet = fleet_of(pool(tmp_path))
        fleet.grow(1)
        fleet._records["c-0"] = before = JobRecord("c-0", 2, job_id="3", phase=state, state=word)
        event = _event("c-0", kind)
        label, _ = event.change(before)
        expected = state if label is None else TRANSITIONS.get((state, label))
        if expected is None:
            with pytest.raises(JobStateError, match=f"job c-0 \\(id 3\\): '{label}' is not allowed"):
                fleet.apply(event)
            assert fleet.records["c-0"] is before and list(fleet.spec) == ["c-0"]
        else:
            fleet.apply(event)
            assert fleet.records["c-0"].phase is expected, (state, kind)
            assert fleet.records["c-0"].info().state in SHOWN
            made |= {(state, label)} - {(state, None)}
    assert made == set(TRANSITIONS)


class RawEvents(RuleBasedStateMachine):
    """Any event on any job: a move in the table happens, any other raises and changes
    nothing; the fleet's dicts stay consistent with the records."""

    def __init__(self):
        super().__init__()
        self.fleet = fleet_of(pool(RawEvents.tmp_path))
        self.ended: dict[str, JobState] = {}

    @precondition(lambda self: sum(not r.ended for r in self.fleet.records.values()) < 2)
    @rule()
    def new_job(self):
        self.fleet.grow(1)
        self.fleet.new_record(list(self.fleet.spec)[-1])

    @precondition(lambda self: self.fleet.records)
    @rule(data=st.data(), kind=st.sampled_from(_KINDS))
    def event(self, data, kind):
        live = sorted(n for n, r in self.fleet.records.items() if not r.ended)
        # few jobs, many events each; now and then one to a job that is over
        name = data.draw(st.sampled_from(live if live and data.draw(st.integers(0, 4)) else
                                         sorted(self.fleet.records)))
        event, before = _drawn_event(name, kind, data), self.fleet.records[name]
        label, _ = event.change(before)
        dicts = dict(self.fleet.spec), dict(self.fleet.jobs)
        if label is not None and (before.phase, label) not in TRANSITIONS:
            with pytest.raises(JobStateError):
                self.fleet.apply(event)
            assert self.fleet.records[name] is before
            assert (dict(self.fleet.spec), dict(self.fleet.jobs)) == dicts
            return
        self.fleet.apply(event)
        after = self.fleet.records[name]
        assert after.phase is (before.phase if label is None else TRANSITIONS[before.phase, label])

    @invariant()
    def consistent(self):
        fleet = self.fleet
        for name, record in fleet.records.items():
            assert record.info().state in SHOWN
            if record.ended:
                assert name not in fleet.spec and name not in fleet.jobs
                assert self.ended.setdefault(name, record.phase) is record.phase  # over is over
            if record.retiring:
                assert name not in fleet.spec
        assert set(fleet.jobs) <= set(fleet.submitted)
        assert fleet.retiring() <= set(fleet.jobs) | {n for n, r in fleet.records.items()
                                                       if r.job_id is None}


# ---------------------------------------------------------------------- the parts together
class PartsTogether(RuleBasedStateMachine):
    """The monitor, walltime planner and submitter over random scheduler answers, worker
    connections and scale requests: strict job states never raise, and the fleet stays
    consistent."""

    def __init__(self):
        super().__init__()
        plan = Retirement.create(3600, 300, 60, 120)
        self.fleet = fleet_of(pool(PartsTogether.tmp_path, retirement=plan))
        self.monitor, _ = monitor_of(self.fleet, keep_requeued=PartsTogether.keep)
        self.monitor.max_failed_jobs = 10**6  # explore: replacements go on
        self.submitter, *_ = submitter_of(self.fleet, self.connected)
        self.planner = WalltimePlanner(self.fleet)
        self.answers: dict[str, str] = {}
        self.workers: dict[str, set[str]] = {}

    def connected(self):
        return {job: set(names) for job, names in self.workers.items()}

    @rule(jobs=st.integers(0, 3))
    def scale(self, jobs):
        self.fleet.scale_to(jobs, "default", self.connected, self.monitor.may_submit)
        asyncio.run(self.submitter.correct(running=True))

    @rule(data=st.data())
    def poll(self, data):
        live = sorted(self.fleet.live())
        lines = [f"{job_id}|{data.draw(st.sampled_from(_SQUEUE))}" for job_id in live
                 if data.draw(st.sampled_from([True] * 4 + [False]))]  # else: not listed
        self.answers["squeue"] = "\n".join(lines) + "\n"
        self.answers["scontrol"] = data.draw(st.sampled_from(["", "ExitCode=1:0", "ExitCode=0:0"]))
        asyncio.run(self.monitor.poll())
        asyncio.run(self.submitter.correct(running=True))

    @rule()
    def forgive(self):
        """A job that failed at once stops replacements: start them again, to explore on."""
        self.monitor.failed_at_once = False

    @precondition(lambda self: self.fleet.records)
    @rule(data=st.data(), count=st.integers(0, 2))
    def workers_connect(self, data, count):
        live = [n for n, r in self.fleet.records.items() if not r.ended]
        name = data.draw(st.sampled_from(live or sorted(self.fleet.records)))
        self.workers[name] = {f"{name}-0-{i}" for i in range(count)}
        self.fleet.refresh(self.connected())

    @rule(later=st.sampled_from([0.0, 4000.0]))  # not due yet, or due (replace_at: 3240 s)
    def walltime(self, later):
        self.planner.replace_due(time.monotonic() + later)
        asyncio.run(self.submitter.correct(running=True))

    @invariant()
    def consistent(self):
        for name, record in self.fleet.records.items():
            assert record.info().state in SHOWN
            assert not record.ended or name not in self.fleet.spec
            assert record.phase in LIVE or record.ended or record.phase is S.SUBMITTED


#: squeue's words after the job id (state|nodes|reason), as the monitor's own command prints them
_SQUEUE = ["RUNNING|node1|None"] * 6 + ["PENDING||None", "PENDING||BeginTime", "COMPLETING|node1|None",
           "COMPLETED|node1|None", "FAILED|node1|NonZeroExitCode", "CANCELLED|node1|None",
           "SUSPENDED|node1|None", "PENDING|node1|Resources"]


@pytest.fixture
def seam(tmp_path):
    """The subprocess seam answering from the machine's ``answers`` (squeue, scontrol)."""
    machine = SimpleNamespace(answers={})

    def runner(argv, timeout, input):
        return CommandResult(tuple(argv), 0, machine.answers.get(argv[0], ""), "")

    set_runner(runner)
    yield machine
    set_runner(None)


#: the same examples at every run (a failure reproduces); more with HPCGPU_PROPERTY_EXAMPLES
_SETTINGS = settings(max_examples=int(os.environ.get("HPCGPU_PROPERTY_EXAMPLES", 60)),
                     stateful_step_count=25, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


def test_raw_events_follow_the_table(tmp_path):
    RawEvents.tmp_path = tmp_path
    RawEvents.TestCase.settings = settings(_SETTINGS, stateful_step_count=30)
    RawEvents.TestCase().runTest()


@pytest.mark.parametrize("keep", [False, True], ids=["requeue-replaced", "requeue-kept"])
def test_the_parts_make_only_allowed_moves(tmp_path, seam, keep):
    FakeJob.ids = iter(range(1000, 10**6))

    class Machine(PartsTogether):
        def __init__(self):
            super().__init__()
            self.answers = seam.answers

    PartsTogether.tmp_path, PartsTogether.keep = tmp_path, keep
    Machine.TestCase.settings = _SETTINGS
    Machine.TestCase().runTest()
