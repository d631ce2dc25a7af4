"""Caps on queued and running jobs without a scheduler: validation, site ceilings, the
arithmetic of how many jobs may go out (hypothesis), and the gate on a fleet of records."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import dask
import pytest
from hypothesis import given, settings, strategies as st

from hpcgpu import SLURMCluster
from hpcgpu.cluster.batch.admission import ClusterCaps, JobGate, cluster_caps, usage_of
from hpcgpu.cluster.batch.arrays import run_fits
from hpcgpu.cluster.batch.job_caps import JobCaps, Usage, admit, plan
from hpcgpu.cluster.batch.job_kinds import GPU_JOBS
from hpcgpu.cluster.batch.job_state import JobState

caps_values = st.one_of(st.none(), st.integers(1, 12))


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("value", [0, -3, 2.5, "two", True, [4]])
@pytest.mark.parametrize("field", ["max_queued_jobs", "max_running_jobs"])
def test_bad_caps_are_refused_by_the_constructor_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field}="):
        SLURMCluster(gpus_per_node=1, **{field: value})


def test_bad_cap_from_the_config_names_its_key():
    with dask.config.set({"hpcgpu.max-queued-jobs": "many"}):
        with pytest.raises(ValueError, match=r"max_queued_jobs='many' is not a whole number"
                           r".*hpcgpu\.max-queued-jobs of your dask config"):
            cluster_caps("slurm", {})


def test_a_pools_bad_cap_names_the_pool():
    with pytest.raises(ValueError, match=r"^pools\['cpu'\]: max_running_jobs=0 must be"):
        cluster_caps("slurm", {}, None, {"cpu": {"max_running_jobs": 0}})


def test_config_keys_and_precedence():
    with dask.config.set({"hpcgpu.max-queued-jobs": 9, "hpcgpu.slurm.max-queued-jobs": 5,
                          "hpcgpu.max-running-jobs": 7}):
        assert cluster_caps("slurm", {}).total == JobCaps(5, 7)
        assert cluster_caps("sge", {}).total == JobCaps(9, 7)
        assert cluster_caps("slurm", {"max_queued_jobs": 2}).total == JobCaps(2, 7)
    assert cluster_caps("slurm", {}).total == JobCaps(None, None)


SITE = {"hpcgpu.profiles.site": {"scheduler": "slurm", "max-queued-jobs": 4,
                                 "max-running-jobs": 2}}


def test_site_caps_are_ceilings():
    with dask.config.set(SITE):
        assert cluster_caps("slurm", {}, "site").total == JobCaps(4, 2)  # the site's
        assert cluster_caps("slurm", {"max_queued_jobs": 3}, "site").total == JobCaps(3, 2)
        with pytest.raises(ValueError, match=r"max_queued_jobs=5 is above the site's ceiling "
                           r"max_queued_jobs=4 \(profile 'site' \(hpcgpu.profiles.site\)\): "
                           r"give max_queued_jobs<=4, or leave it out"):
            cluster_caps("slurm", {"max_queued_jobs": 5}, "site")
        with dask.config.set({"hpcgpu.slurm.max-running-jobs": 3}):  # the user's own config
            with pytest.raises(ValueError, match=r"max_running_jobs=3 is above .* "
                               r"\(the value comes from hpcgpu.slurm.max-running-jobs"):
                cluster_caps("slurm", {}, "site")
        with pytest.raises(ValueError, match=r"^pools\['big'\]: max_running_jobs=3 is above"):
            cluster_caps("slurm", {}, "site", {"big": {"max_running_jobs": 3}})
        with dask.config.set({"hpcgpu.slurm.profile": "site"}):  # the site's own choice
            assert cluster_caps("slurm", {}).total == JobCaps(4, 2)


# ------------------------------------------------------------------ arithmetic
@settings(max_examples=300, deadline=None, derandomize=True)
@given(wanted=st.integers(0, 40), queued_cap=caps_values, running_cap=caps_values,
       queued=st.integers(0, 14), running=st.integers(0, 14), throttled=st.booleans())
def test_admit_never_exceeds_a_cap_and_holds_back_no_more_than_it_must(
        wanted, queued_cap, running_cap, queued, running, throttled):
    caps, usage = JobCaps(queued_cap, running_cap), Usage(queued, running)
    a = admit(wanted, [(caps, usage)], throttled)
    assert 0 <= a.jobs <= wanted
    queue_room = math.inf if queued_cap is None else max(queued_cap - queued, 0)
    run_room = math.inf if running_cap is None else max(running_cap - running, 0)
    assert queued + a.jobs <= max(queued, queued_cap or math.inf)
    assert running + a.running <= max(running, running_cap or math.inf)
    if throttled and min(wanted, queue_room) >= 2 and run_room >= 1:
        assert a.jobs == min(wanted, queue_room)  # the throttle keeps the running cap
    else:
        assert a.jobs == min(wanted, queue_room, run_room)
    assert (a.held is None) == (a.jobs == wanted)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(pools=st.lists(st.tuples(st.integers(0, 20), caps_values, caps_values, st.integers(0, 6),
                                st.integers(0, 6), st.booleans()), min_size=1, max_size=3),
       total=st.tuples(caps_values, caps_values))
def test_plan_keeps_every_pool_and_the_cluster_within_their_caps(pools, total):
    names = [f"p{i}" for i in range(len(pools))]
    wanted = {n: p[0] for n, p in zip(names, pools)}
    caps = {n: JobCaps(p[1], p[2]) for n, p in zip(names, pools)}
    usage = {n: Usage(p[3], p[4]) for n, p in zip(names, pools)}
    out = plan(wanted, usage, caps, JobCaps(*total), {n: p[5] for n, p in zip(names, pools)})
    before = sum(usage.values(), Usage())
    after = sum((usage[n] + Usage(a.jobs, a.running) for n, a in out.items()), Usage())
    for n, a in out.items():
        for cap, used, new in ((caps[n].max_queued_jobs, usage[n].queued, a.jobs),
                               (caps[n].max_running_jobs, usage[n].running, a.running)):
            assert cap is None or used + new <= max(cap, used)
    for cap, used, now in ((total[0], before.queued, after.queued),
                           (total[1], before.running, after.running)):
        assert cap is None or now <= max(cap, used)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(runs=st.lists(st.integers(1, 8), min_size=1, max_size=5),
       room=st.one_of(st.none(), st.integers(0, 12)), throttle=st.one_of(st.none(), st.integers(1, 5)),
       throttles=st.booleans())
def test_runs_made_together_stay_within_the_running_room(runs, room, throttle, throttles):
    left, running = room, 0
    for length in runs:
        fits, own, used = run_fits(length, left, throttle, throttles)
        if not fits:
            continue
        # the scheduler runs at most the array's throttle at once, where it keeps one
        running += min(length, own) if (own is not None and throttles and length > 1) else length
        if left is not None:
            left -= used
    assert room is None or running <= room


@settings(max_examples=150, deadline=None, derandomize=True)
@given(caps=st.tuples(caps_values, caps_values), throttled=st.booleans(),
       steps=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 6), st.integers(0, 4)),
                      min_size=1, max_size=25))
def test_a_scheduler_simulated_never_shows_more_queued_or_running_than_the_caps(
        caps, throttled, steps):
    """Targets change, the scheduler starts jobs (keeping each array's throttle) and ends
    them; after every step its queue and its running jobs are within the caps."""
    cap = JobCaps(*caps)
    jobs: list[list] = []  # [array id or None, running]
    throttles: dict[int, int | None] = {}
    for target, starts, ends in steps:
        alive = len(jobs)
        usage = usage_of(_fleet(jobs, throttles))
        a = plan({"default": max(target - alive, 0)}, usage, {}, cap, {"default": throttled})["default"]
        fits, own, _ = run_fits(a.jobs, a.room, None, throttled) if a.jobs else (False, None, 0)
        if fits:
            group = len(throttles) if a.jobs > 1 else None
            if group is not None:
                throttles[group] = own if throttled else None
            jobs += [[group, False] for _ in range(a.jobs)]
        for job in [j for j in jobs if not j[1]][:starts]:  # the scheduler starts some
            group = job[0]
            limit = throttles.get(group) if group is not None else None
            if limit is None or sum(j[1] for j in jobs if j[0] == group) < limit:
                job[1] = True
        for job in [j for j in jobs if j[1]][:ends]:  # and some end
            jobs.remove(job)
        assert cap.max_queued_jobs is None or sum(not j[1] for j in jobs) <= cap.max_queued_jobs
        assert cap.max_running_jobs is None or sum(j[1] for j in jobs) <= cap.max_running_jobs


def _fleet(jobs: list[list], throttles: dict) -> SimpleNamespace:
    """A fleet of ``jobs`` ([array id or None, running]) in the default pool."""
    submissions = {g: SimpleNamespace(throttle=t) for g, t in throttles.items()}
    records, started = {}, {}
    for i, (group, running) in enumerate(jobs):
        name = f"c-{i}"
        records[name] = SimpleNamespace(
            ended=False, phase=JobState.RUNNING if running else JobState.PENDING)
        started[name] = SimpleNamespace(submission=submissions.get(group)) if group is not None \
            else object()
    pool = SimpleNamespace(name="default", kind=GPU_JOBS)
    return SimpleNamespace(jobs=started, records=records, job_pool=lambda name: pool,
                           pools={"default": pool})


# ------------------------------------------------------------------ the gate
def test_gate_submits_the_oldest_and_says_once_per_hold(caplog):
    fleet = _fleet([[None, False]], {})
    fleet.arrays = SimpleNamespace(settings=SimpleNamespace(enabled=True),
                                   dialect=SimpleNamespace(name="slurm"))
    fleet.jobs_of = lambda pool: list(fleet.jobs)
    gate = JobGate(fleet, ClusterCaps(JobCaps(3, None)))
    with caplog.at_level(logging.WARNING, logger="hpcgpu.cluster"):
        for _ in range(3):  # three reconciliations, one message
            names, rooms = gate.choose({"c-10", "c-9", "c-11", "c-2"})
            assert names == ["c-2", "c-9"] and rooms == {"default": None}
        fleet.records["c-0"] = SimpleNamespace(ended=False, phase=JobState.RUNNING)
        assert gate.choose({"c-9"})[0] == ["c-9"]  # the hold ended
        gate.choose({"c-9", "c-10", "c-11", "c-12"})  # and a new one is said again
    said = [r.getMessage() for r in caplog.records]
    assert said == ["max_queued_jobs=3 holds back new jobs: 2 submitted now; the other 2 of "
                    "the target wait here and are submitted as queued jobs start",
                    "max_queued_jobs=3 holds back new jobs: 3 submitted now; the other 1 of "
                    "the target wait here and are submitted as queued jobs start"], said


def test_gate_says_once_when_an_array_throttle_holds_jobs_in_the_queue(caplog):
    fleet = _fleet([], {})
    fleet.arrays = SimpleNamespace(settings=SimpleNamespace(enabled=True),
                                   dialect=SimpleNamespace(name="sge"))
    gate = JobGate(fleet, ClusterCaps(JobCaps(None, 2)))
    with caplog.at_level(logging.WARNING, logger="hpcgpu.cluster"):
        assert gate.choose({"c-0", "c-1", "c-2"}) == (["c-0", "c-1", "c-2"], {"default": 2})
    assert [r.getMessage() for r in caplog.records] == [
        "max_running_jobs=2: the 3 new jobs go out as one array, at most 2 of them running "
        "at once; the others wait in the scheduler's queue"]
    fleet.arrays.dialect.name = "pbs"  # no throttle: the jobs the cap allows, no more
    assert gate.choose({"c-0", "c-1", "c-2"}) == (["c-0", "c-1"], {"default": 2})


def test_gate_without_caps_lets_everything_out():
    gate = JobGate(_fleet([], {}))
    assert gate.choose({"c-1", "c-0"}) == (["c-0", "c-1"], {})


def test_usage_counts_array_elements_up_to_their_throttle():
    fleet = _fleet([[0, True], [0, False], [0, False], [None, False], [1, True]], {0: 2, 1: None})
    assert usage_of(fleet) == {"default": Usage(queued=3, running=2 + 1 + 1)}


@pytest.mark.filterwarnings("ignore")
def test_cluster_and_pool_caps_reach_the_gate_and_not_the_job_scripts(clusters):
    from hpcgpu import PBSCluster

    cpu = dict(gpus_per_node=0, cores_per_node=4, memory_per_node="8GB", queue="debug")
    common = dict(gpus_per_node=2, queue="gpu", walltime="00:10:00",
                  scheduler_options={"dashboard_address": "localhost:0"})
    # (qstat cannot say what the queues offer here: warned only, and ignored)
    cluster = clusters(PBSCluster, **common, max_queued_jobs=3,
                       pools={"cpu": dict(cpu, max_queued_jobs=1, max_running_jobs=2)})
    assert cluster.submitter.gate.caps == ClusterCaps(JobCaps(3, None),
                                                      {"cpu": JobCaps(1, 2)})
    assert "max" not in cluster.job_script(pool="cpu") + cluster.job_script()
    with pytest.raises(ValueError, match=r"^pools\['cpu'\]: max_queued_jobs=-1 must be"):
        PBSCluster(**common, pools={"cpu": dict(cpu, max_queued_jobs=-1)})
