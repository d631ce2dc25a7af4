"""A job the batch scheduler puts back in its queue after it ran (SLURM's default after a
node failure, ``JobRequeue=1``): the monitor sees RUNNING then PENDING, and the job's
workers are gone. Without ``requeue=True`` it is cancelled and replaced at once (SLURM
would hold it about two minutes); with it, it keeps its place. The squeue lines are real:
tests/data/slurm-22.05-squeue-requeued.txt (the monitor's own command on the site in a box,
a job's node killed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_cluster_parts import fleet_of, monitor_of, pool, submitted

from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.system.commands import CommandResult, set_runner

DATA = Path(__file__).resolve().parents[1] / "data"
#: the monitor's squeue lines of one job: running, requeued (reason None, then BeginTime), cancelled
RUNNING, REQUEUED, HELD, CANCELLED = (DATA / "slurm-22.05-squeue-requeued.txt").read_text().splitlines()


@pytest.fixture
def commands():
    """The subprocess seam: records argv; squeue answers ``answers["squeue"]``."""
    ran, answers = [], {}

    def runner(argv, timeout, input):
        ran.append(list(argv))
        return CommandResult(tuple(argv), *answers.get(argv[0], (0, "")), "")

    set_runner(runner)
    yield SimpleNamespace(ran=ran, answers=answers)
    set_runner(None)


def polled(monitor, commands, line):
    """One poll of the monitor with ``line`` as squeue's answer (its job id made 46)."""
    commands.answers["squeue"] = (0, "46" + line[line.index("|"):] + "\n")
    return asyncio.run(monitor.poll())


def running_job(tmp_path, commands, **monitor):
    fleet = fleet_of(pool(tmp_path))
    fleet.scale_to(1, "default", dict, lambda: True)
    job = submitted(fleet, "c-0", "46", fully_started=True)
    monitor, calls = monitor_of(fleet, **monitor)
    assert polled(monitor, commands, RUNNING)
    assert fleet.records["c-0"].state == "running" and fleet.records["c-0"].started is not None
    return fleet, job, monitor, calls


def test_the_captured_lines_are_a_requeue():
    statuses = [get_dialect("slurm").parse_status(line).popitem()[1]
                for line in (RUNNING, REQUEUED, HELD, CANCELLED)]
    assert [(s.state, s.reason) for s in statuses] == [
        ("running", "None"), ("pending", "None"), ("pending", "BeginTime"), ("cancelled", "BeginTime")]
    assert statuses[0].nodes == ("node2",) and statuses[1].nodes == ()


def test_a_requeued_job_is_cancelled_and_replaced_at_once(tmp_path, commands):
    fleet, job, monitor, calls = running_job(tmp_path, commands)
    assert polled(monitor, commands, REQUEUED)
    record = fleet.records["c-0"]
    assert record.ended and record.state == "cancelled" and record.cancelled_by_us
    assert ["scancel", "46"] in commands.ran and job.closed and "c-0" not in fleet.jobs
    # capacity counted once: the requeued job out of the spec, one replacement in
    assert list(fleet.spec) == ["c-1"] and fleet.targets == {"default": 1} and calls.reconcile == 1
    (event,) = monitor.events
    assert event.startswith("job c-0 (id 46) was put back in the queue by the scheduler after it "
                            "ran (its node failed or it was preempted; reason: none given): "
                            "cancelled and replaced now"), event
    assert "recomputed elsewhere" in event and monitor.failures == []
    commands.ran.clear()
    assert not polled(monitor, commands, HELD)  # ended: not asked about again, nothing done
    assert commands.ran == [] and list(fleet.spec) == ["c-1"] and len(monitor.events) == 1


def test_a_job_pending_since_its_submission_is_left_alone(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    fleet.scale_to(1, "default", dict, lambda: True)
    submitted(fleet, "c-0", "46")
    monitor, calls = monitor_of(fleet)
    polled(monitor, commands, HELD)
    polled(monitor, commands, REQUEUED)
    assert fleet.records["c-0"].state == "pending" and not fleet.records["c-0"].ended
    assert list(fleet.spec) == ["c-0"] and monitor.events == [] and calls.reconcile == 0


def test_a_suspended_job_keeps_its_nodes_and_is_left_alone(tmp_path, commands):
    fleet, job, monitor, calls = running_job(tmp_path, commands)
    _, suspended = (DATA / "slurm-22.05-squeue-suspended.txt").read_text().splitlines()
    assert polled(monitor, commands, suspended)
    assert not fleet.records["c-0"].ended and fleet.jobs["c-0"] is job and list(fleet.spec) == ["c-0"]
    assert monitor.events == [] and not any(argv[0] == "scancel" for argv in commands.ran)


def test_with_requeue_true_a_requeued_job_keeps_its_place(tmp_path, commands):
    fleet, job, monitor, calls = running_job(tmp_path, commands, keep_requeued=True)
    polled(monitor, commands, HELD)
    record = fleet.records["c-0"]
    assert record.state == "pending" and not record.ended and record.started is None
    assert list(fleet.spec) == ["c-0"] and fleet.jobs["c-0"] is job and calls.reconcile == 0
    assert not any(argv[0] == "scancel" for argv in commands.ran)
    (event,) = monitor.events
    assert "reason: BeginTime); requeue=True: its workers start again when it runs" in event
    polled(monitor, commands, HELD)  # reported once
    polled(monitor, commands, RUNNING)  # ran again: its walltime restarts
    record = fleet.records["c-0"]
    assert len(monitor.events) == 1 and record.started is not None and record.state == "running"


def test_a_requeued_job_is_not_replaced_once_the_cluster_stops(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    fleet.scale_to(1, "default", dict, lambda: True)
    submitted(fleet, "c-0", "46", fully_started=True)
    monitor, calls = monitor_of(fleet, running=lambda: False)
    polled(monitor, commands, RUNNING)
    polled(monitor, commands, REQUEUED)
    assert fleet.records["c-0"].ended and ["scancel", "46"] in commands.ran
    assert fleet.spec == {} and calls.reconcile == 0
