"""The cluster's parts, each alone, without a scheduler or a Dask cluster: the fleet
(pools, names, spec entries, records), the monitor (states, ends, failures), the walltime
planner, the submitter (spec -> jobs) and the scaling policy."""

from __future__ import annotations

import asyncio
import time
import warnings
from types import SimpleNamespace

import pytest

from hpcgpu.cluster.batch import scaling
from hpcgpu.cluster.batch.arrays import ArraySettings, JobArrays
from hpcgpu.cluster.batch.fleet import JobFleet
from hpcgpu.cluster.batch.job_events import Retiring, Seen
from hpcgpu.cluster.batch.job_state import JobState
from hpcgpu.cluster.batch.job_table import JobRecord
from hpcgpu.cluster.batch.monitor import AT_ONCE, JobMonitor
from hpcgpu.cluster.batch.pools import Pool
from hpcgpu.cluster.batch.setup import prepare
from hpcgpu.cluster.batch.submitter import JobSubmitter
from hpcgpu.cluster.batch.walltime_planner import GATHER_WINDOW, WalltimePlanner
from cluster_helpers import answered_commands  # noqa: F401 (the fixture 'commands')
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.walltime import Retirement

SLURM = get_dialect("slurm")


class FakeJob:
    """What the fleet, submitter and monitor use of a job."""

    ids = iter(range(100, 1000))

    def __init__(self, scheduler=None, name=None, fail=False, **options):
        self.name, self.fail, self.options = name, fail, options
        self.job_id, self.ended, self.closed = None, False, False

    def __await__(self):
        async def start():
            if self.fail:
                raise RuntimeError(f"sbatch refused {self.name}")
            self.job_id = str(next(FakeJob.ids))
            return self
        return start().__await__()

    async def close(self):
        self.closed = True


def pool(tmp_path, name="default", retirement=None, **options):
    setup = prepare("slurm", {"gpus_per_node": 2, "log_directory": str(tmp_path), **options})
    return Pool(name, setup, retirement, {"cls": FakeJob, "options": {}})


def fleet_of(*pools):
    fleet = JobFleet(lambda n: f"c-{n}", arrays=JobArrays(ArraySettings(False), SLURM))
    for p in pools:
        fleet.add_pool(p)
    return fleet


# ---------------------------------------------------------------------- fleet
def test_fleet_names_are_never_reused_and_pools_keep_their_jobs(tmp_path):
    fleet = fleet_of(pool(tmp_path), pool(tmp_path, "big", gpus_per_node=4))
    fleet.grow(2)
    fleet.grow(1, "big")
    assert list(fleet.spec) == ["c-0", "c-1", "c-big-0"]  # each pool counts from 0 (docs/pools.md)
    assert fleet.jobs_of("big") == ["c-big-0"] and fleet.job_pool("c-big-0").name == "big"
    fleet._records["c-1"] = JobRecord("c-1", 2)
    del fleet.spec["c-1"]  # ended: its name stays taken (its workers' names too)
    fleet.grow(1)
    assert fleet.jobs_of("default") == ["c-0", "c-2"]
    with pytest.raises(ValueError, match="pool='cpu' is not a pool of this cluster: use one "
                                         "of 'default', 'big'"):
        fleet.pool("cpu")


def test_fleet_shrinks_unconnected_newest_first_and_retire_sets_the_targets(tmp_path):
    fleet = fleet_of(pool(tmp_path))
    fleet.scale_to(4, "default", dict, lambda: True)
    assert fleet.targets == {"default": 4} and len(fleet.spec) == 4
    fleet.scale_to(2, "default", lambda: {"c-3": {"c-3-0-0"}, "c-0": {"c-0-0-0"}},
                   lambda: True)
    assert list(fleet.spec) == ["c-0", "c-3"]  # c-2 and c-1 had no worker connected
    fleet.scale_to(5, "default", dict, lambda: False)  # no more submissions allowed
    assert fleet.targets == {"default": 5} and fleet.missing() == {"default": 3}
    fleet._records["c-3"] = JobRecord("c-3", 2, phase=JobState.RETIRING, state="running")
    fleet.retire(["c-3"])
    assert list(fleet.spec) == ["c-0"] and fleet.targets == {"default": 1}
    assert not fleet.records["c-3"].retiring  # asked for: retired now, not left to expire
    fleet.clear()
    assert fleet.spec == {} and fleet.targets == {"default": 0}


def test_fleet_records_follow_connected_workers(tmp_path):
    fleet = fleet_of(pool(tmp_path))
    fleet._records["c-0"] = JobRecord("c-0", expected=2, phase=JobState.PENDING, state="pending")
    fleet.refresh({"c-0": {"c-0-0-0"}})
    record = fleet.records["c-0"]
    assert record.state == "running" and record.phase is JobState.RUNNING
    assert not record.fully_started
    fleet.refresh({"c-0": {"c-0-0-0", "c-0-0-1"}})
    fleet.refresh({})
    record = fleet.records["c-0"]
    assert record.fully_started and record.connected == set()
    assert [j.workers for j in fleet.table()] == [()]


def test_fleet_job_key_knows_the_pools(tmp_path):
    fleet = fleet_of(pool(tmp_path), pool(tmp_path, "cpu1"))
    key = fleet.key_jobs("C")
    assert key("C-cpu1-4-0-1") == "C-cpu1-4" and key("C-3-1-0") == "C-3"
    fleet.pool_of["C-cpu1-4"] = "cpu1"
    assert fleet.worker_pool("C-cpu1-4-0-0") == "cpu1" and fleet.worker_pool("C-3-0-0") == "default"


# ---------------------------------------------------------------------- monitor
def monitor_of(fleet, **kwargs):
    calls = SimpleNamespace(reconcile=0, give_up=0)
    monitor = JobMonitor(
        fleet, SLURM, poll_interval=0.0, tail_lines=3, max_failed_jobs=2,
        connected=dict, reconcile=lambda: setattr(calls, "reconcile", calls.reconcile + 1),
        give_up=lambda: setattr(calls, "give_up", calls.give_up + 1), **kwargs)
    return monitor, calls


def submitted(fleet, name, job_id, **record):
    """Job ``name`` as if submitted (running if ``started`` is given): the fleet's records
    written directly, as test scaffolding."""
    running = record.get("started") is not None
    fleet._records[name] = JobRecord(
        name, 2, job_id=job_id, phase=JobState.RUNNING if running else JobState.PENDING,
        state="running" if running else "pending", **record)
    fleet.jobs[name] = job = FakeJob(name=name)
    job.job_id = job_id
    return job


def test_monitor_reports_a_job_that_failed_to_start_and_replaces_it(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path, job_name="w"))
    fleet.scale_to(1, "default", dict, lambda: True)
    job = submitted(fleet, "c-0", "41", started=time.monotonic() - AT_ONCE - 1)  # not at once
    (tmp_path / "w-41.err").write_text("start\nImportError: no module named x\nend\n")
    commands.answers["squeue"] = (0, "41|FAILED|node1|NonZeroExitCode\n")
    commands.answers["scontrol"] = (0, "JobState=FAILED ExitCode=3:0\n")
    monitor, calls = monitor_of(fleet)
    assert asyncio.run(monitor.poll())
    record = fleet.records["c-0"]
    assert record.ended and record.state == "failed" and record.exit_code == 3
    assert job.closed and "c-0" not in fleet.jobs
    (report,) = monitor.failures
    assert "job c-0 (id 41) ended before its workers connected" in report
    assert "ImportError: no module named x" in report
    assert list(fleet.spec) == ["c-1"] and calls.reconcile == 1  # replaced


def test_monitor_gives_up_after_a_job_that_failed_at_once(tmp_path, commands):
    """Exit 1 before a poll saw it run: the job's script or environment, not its node; no
    replacement, and the report carries the scheduler's own words."""
    fleet = fleet_of(pool(tmp_path))
    fleet.scale_to(1, "default", dict, lambda: True)
    submitted(fleet, "c-0", "46")
    commands.answers["squeue"] = (0, "46|FAILED|node1|NonZeroExitCode\n")
    commands.answers["scontrol"] = (0, "JobState=FAILED ExitCode=1:0\n")
    monitor, calls = monitor_of(fleet)
    asyncio.run(monitor.poll())
    assert monitor.failed_at_once and monitor.gave_up and len(monitor.failures) == 1
    assert "the scheduler says: NonZeroExitCode" in monitor.failures[0]
    assert fleet.spec == {} and calls.give_up == 1 and calls.reconcile == 0


def test_monitor_gives_up_after_max_failed_jobs(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    fleet.scale_to(1, "default", dict, lambda: True)
    monitor, calls = monitor_of(fleet)
    monitor.failures.append("an earlier one")
    submitted(fleet, "c-0", "42")
    commands.answers["squeue"] = (0, "42|FAILED|node1|NonZeroExitCode\n")
    asyncio.run(monitor.poll())
    assert len(monitor.failures) == 2 and monitor.gave_up and not monitor.may_submit()
    assert fleet.spec == {} and calls.give_up == 1 and calls.reconcile == 0


def test_monitor_keeps_states_when_the_status_command_fails(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    fleet.spec["c-0"] = fleet.pools["default"].spec
    submitted(fleet, "c-0", "43")
    commands.answers["squeue"] = (1, "")  # not "Invalid job id": the controller is away
    monitor, _ = monitor_of(fleet)
    assert not asyncio.run(monitor.poll()) and not asyncio.run(monitor.poll())
    assert monitor.status_failures == 2 and fleet.records["c-0"].state == "pending"
    commands.answers["squeue"] = (0, "43|RUNNING|node2|None\n")
    assert asyncio.run(monitor.poll())
    assert monitor.status_failures == 0 and fleet.records["c-0"].nodes == ("node2",)
    assert fleet.records["c-0"].started is not None


def test_monitor_a_job_gone_from_the_queue_ended_and_ours_is_no_failure(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    submitted(fleet, "c-0", "44", cancelled_by_us=True, fully_started=True)
    submitted(fleet, "c-1", "45", fully_started=True)
    commands.answers["squeue"] = (0, "")
    monitor, _ = monitor_of(fleet)
    asyncio.run(monitor.poll())
    assert fleet.records["c-0"].state == "cancelled" and fleet.records["c-1"].state == "completed"
    assert monitor.failures == [] and len(monitor.events) == 1
    assert "job c-1 (id 45) ended while its workers were connected" in monitor.events[0]


# ---------------------------------------------------------------------- walltime
def test_walltime_planner_replaces_in_the_jobs_own_pool(tmp_path):
    plan = Retirement.create(3600, 300, 60, 120)
    fleet = fleet_of(pool(tmp_path), pool(tmp_path, "long", retirement=plan))
    fleet.grow(1)
    fleet.grow(1, "long")
    for name in fleet.spec:
        fleet._records[name] = JobRecord(name, 2, job_id="7", phase=JobState.RUNNING,
                                        state="running", started=0.0)
    planner = WalltimePlanner(fleet)
    assert planner.replace_due(now=plan.replace_at - GATHER_WINDOW - 1) == []
    (message,) = planner.replace_due(now=plan.replace_at)
    assert message.startswith("job c-long-0 (id 7) nears its walltime: its workers retire "
                               f"from about {plan.first_retirement - plan.replace_at:.0f} s")
    assert fleet.records["c-long-0"].retiring and fleet.retiring() == {"c-long-0"}
    assert list(fleet.spec) == ["c-0", "c-long-1"] and planner.events == [message]
    assert planner.replace_due(now=plan.replace_at + 1) == []  # once


def test_walltime_replacements_due_within_the_gather_window_go_out_together(tmp_path):
    """Elements of one array seen running at polls a few seconds apart: their replacements
    are one submit; a job that started later than the window waits for its own time."""
    plan = Retirement.create(3600, 300, 60, 120)
    fleet = fleet_of(pool(tmp_path, "long", retirement=plan))
    fleet.grow(3, "long")
    starts = dict(zip(fleet.spec, (0.0, 2.0, 2 * GATHER_WINDOW + 1.0)))
    for name, started in starts.items():
        fleet._records[name] = JobRecord(name, 1, job_id="7", phase=JobState.RUNNING,
                                        state="running", started=started)
    planner = WalltimePlanner(fleet)
    assert planner.replace_due(now=plan.replace_at - 1) == []  # none due yet: none goes early
    first = planner.replace_due(now=plan.replace_at)
    assert [m.split(" (")[0] for m in first] == ["job c-long-0", "job c-long-1"]
    assert planner.replace_due(now=plan.replace_at + 1) == []
    assert planner.replace_due(now=plan.replace_at + 2 * GATHER_WINDOW) == []
    (last,) = planner.replace_due(now=plan.replace_at + 2 * GATHER_WINDOW + 1.0)
    assert last.startswith("job c-long-2 ")


# ---------------------------------------------------------------------- submitter
def submitter_of(fleet, connected=dict):
    monitor, _ = monitor_of(fleet)
    retired, adopted = [], []

    async def retire(names):
        retired.extend(names)

    submitter = JobSubmitter(fleet, monitor, SLURM, address=lambda: "tls://s:1",
                             connected=connected, retire=retire, adopt=adopted.append)
    return submitter, monitor, retired, adopted


def test_submitter_submits_new_entries_and_reports_refusals(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    fleet.grow(2)
    fleet.spec["c-1"] = {"cls": FakeJob, "options": {"fail": True}}
    submitter, monitor, _, adopted = submitter_of(fleet)
    asyncio.run(submitter.correct(running=True))  # reported once, in monitor.failures
    assert list(fleet.jobs) == ["c-0"] and adopted == [fleet.jobs["c-0"]]
    assert fleet.records["c-0"].state == "pending" and fleet.submitted == fleet.jobs
    assert fleet.records["c-1"].state == "failed" and "c-1" not in fleet.spec
    assert monitor.failures == ["submitting job c-1 failed: sbatch refused c-1"]


def test_submitter_retires_workers_then_cancels_with_one_command(tmp_path, commands):
    fleet = fleet_of(pool(tmp_path))
    for name, job_id in (("c-0", "50"), ("c-1", "51"), ("c-2", "52")):
        fleet.spec[name] = fleet.pools["default"].spec
        submitted(fleet, name, job_id)
    fleet.apply(Seen("c-2", "running", at=0.0))
    fleet.apply(Retiring("c-2"))  # left to end by itself near its walltime
    fleet.spec.clear()
    submitter, _, retired, _ = submitter_of(fleet, lambda: {"c-0": {"c-0-0-0", "c-0-0-1"}})
    asyncio.run(submitter.correct(running=True))
    assert retired == ["c-0-0-0", "c-0-0-1"]
    assert commands.ran == [["scancel", "50", "51"]] or commands.ran == [["scancel", "51", "50"]]
    assert list(fleet.jobs) == ["c-2"] and fleet.records["c-0"].cancelled_by_us
    asyncio.run(submitter.correct(running=False))  # closing: retiring jobs go too
    assert fleet.jobs == {} and commands.ran[-1] == ["scancel", "52"]


# ---------------------------------------------------------------------- scaling policy
def test_scaling_rounds_gpus_up_to_whole_jobs_with_a_warning(tmp_path):
    default = pool(tmp_path, memory_per_gpu="10GB")
    with pytest.warns(UserWarning, match=r"scale\(gpus=3\) rounds up to 2 job\(s\) = 4 GPUs"):
        assert scaling.jobs_to_scale(default, gpus=3) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scaling.jobs_to_scale(default, n=4, jobs=1, memory="50GB") == 3


def test_scaling_adaptive_picks_the_pool_policy_and_checks_its_bounds(tmp_path):
    pools = {"default": pool(tmp_path), "big": pool(tmp_path, "big", gpus_per_node=4)}
    cls, options = scaling.adaptive(pools, {"maximum_gpus": 8}, {"big": {"maximum_jobs": 2}})
    assert cls.__name__ == "PoolAdaptive"
    assert options == {"bounds": {"default": (0, 4), "big": (0, 2)}}
    with pytest.raises(ValueError, match="pool='gpu' is not a pool of this cluster"):
        scaling.adaptive(pools, {}, {"gpu": {}})
    with pytest.raises(ValueError, match=r"adapt\(pools=\{'big': \{'gpus': 2\}\}\): give a dict"):
        scaling.adaptive(pools, {}, {"big": {"gpus": 2}})
    with pytest.raises(ValueError, match=r"needs a cluster made with pools="):
        scaling.adaptive({"default": pools["default"]}, {}, {"big": {}})


def test_job_kinds_gpu_and_cpu_pools_answer_the_same_questions(tmp_path):
    """One protocol, two implementations (hpcgpu.cluster.batch.job_kinds): what a worker advertises,
    its threads, its job's error log, and scale(gpus=)."""
    from hpcgpu.cluster.batch.cpu_setup import prepare_cpu

    cpu_setup = prepare_cpu("slurm", {"cores": 8, "processes": 4, "memory": "28GB",
                                      "log_directory": str(tmp_path), "job_name": "w"})
    fleet = fleet_of(pool(tmp_path, cpus_per_gpu=3, job_name="g"),
                     Pool("cpu", cpu_setup, None, {"cls": FakeJob, "options": {}}))
    assert (fleet.resources("default"), fleet.threads("default")) == ({"GPU": 1.0}, 3)
    assert (fleet.resources("cpu"), fleet.threads("cpu")) == ({}, 2)
    fleet.grow(1)
    fleet.grow(1, "cpu")
    monitor, _ = monitor_of(fleet)
    logs = [monitor.error_log(JobRecord(name, 1, job_id="7")) for name in fleet.spec]
    assert logs == [f"{tmp_path}/g-7.err", f"{tmp_path}/w-7.err"]
    with pytest.raises(ValueError, match=r"scale\(gpus=4, pool='cpu'\): that pool has CPU "):
        scaling.jobs_to_scale(fleet.pools["cpu"], gpus=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # CPU workers round up to whole jobs silently
        assert scaling.jobs_to_scale(fleet.pools["cpu"], n=5) == 2


# ---------------------------------------------------------------------- arrays
def test_arrays_make_consecutive_new_jobs_one_submission(tmp_path, commands):
    from hpcgpu.cluster.batch.arrays import ArrayElementJob
    from hpcgpu.cluster.batch.job import GPUJob

    setup = prepare("slurm", {"gpus_per_node": 2, "log_directory": str(tmp_path)})
    fleet = JobFleet(lambda n: f"c-{n}", arrays=JobArrays(ArraySettings(True), SLURM))
    fleet.add_pool(Pool("default", setup, None, {"cls": GPUJob, "options": setup.job_options}))
    fleet.grow(3)
    commands.answers["scontrol"] = (0, "MaxArraySize            = 2\n")
    jobs = asyncio.run(fleet.make_jobs("tcp://s:1", ["c-2", "c-0", "c-1"]))
    assert list(jobs) == ["c-0", "c-1", "c-2"] and commands.ran == [["scontrol", "show", "config"]]
    first, second, single = jobs.values()
    assert isinstance(first, ArrayElementJob) and isinstance(second, ArrayElementJob)
    assert first.submission is second.submission and (first.index, second.index) == (0, 1)
    assert type(single) is GPUJob  # the site allows 2 elements per array: c-2 alone
    assert "#SBATCH --array=0-1" in first.submission.template.job_script()
    assert [r.state for r in fleet.records.values()] == ["submitting"] * 3
    asyncio.run(fleet.arrays.site_limit())
    assert len(commands.ran) == 1  # the site's limit is read once


# ---------------------------------------------------------------------- wait_for_workers
def test_wait_for_workers_fails_early_once_failed_jobs_leave_too_few(tmp_path):
    from hpcgpu.cluster.batch.progress import wait_for_workers

    fleet = fleet_of(pool(tmp_path))
    fleet.grow(1)
    running = {"a": {"name": "c-0-0-0", "status": "running"}}

    async def workers():
        return running

    asyncio.run(wait_for_workers(1, 5, workers=workers, fleet=fleet, failures=[]))
    with pytest.raises(TimeoutError, match="1 of 3 workers connected after 0 s; jobs:\njob"):
        asyncio.run(wait_for_workers(3, 0, workers=workers, fleet=fleet, failures=[]))
    with pytest.raises(RuntimeError, match="3 workers cannot connect: .*\nthe report"):
        asyncio.run(wait_for_workers(3, None, workers=workers, fleet=fleet,
                                     failures=["the report"]))
