"""Hosts whose worker failed the network check: each scheduler's exclusion lines, and the
cluster's decisions (a failed check on host H -> the next jobs stay off H; the exclusion
ends after its time), without a scheduler (the commands seam answers). The real SLURM and
Grid Engine read the lines back in tests/integration/test_host_exclusion_real.py."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.cluster.batch.arrays import ArraySettings, JobArrays
from hpcgpu.cluster.batch.exclusions import (Exclusion, excluded_after,
                                             exclusion_policy, failed_hosts)
from hpcgpu.cluster.batch.fleet import JobFleet
from hpcgpu.cluster.batch.job_state import JobState
from hpcgpu.cluster.batch.job_table import JobRecord, format_table
from hpcgpu.cluster.batch.monitor import JobMonitor
from hpcgpu.cluster.batch.pools import Pool
from hpcgpu.cluster.batch.silence import heartbeat_source
from hpcgpu.cluster.batch.setup import prepare
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.schedulers.slurm.dialect import SlurmDialect
from cluster_helpers import answered_commands  # noqa: F401 (the fixture 'commands')
from hpcgpu.worker.reach import link_problem

DATA = Path(__file__).parents[1] / "data"
HOST = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", fullmatch=True)
DOWN = ("NetworkCheckError: interface 'ib0' on host node2 is down (link state down): this host "
        "lost its network; ...")


# ---------------------------------------------------------------------- rendering
def test_each_scheduler_renders_its_own_exclusion():
    hosts = ["node2", "node10", "node2"]
    assert get_dialect("slurm").exclusion_directives(hosts) == ("--exclude=node10,node2",)
    assert get_dialect("sge").exclusion_directives(hosts) == ("-l h=!node10&!node2",)
    assert get_dialect("lsf").exclusion_directives(hosts) == (
        '-R "select[hname!=node10 && hname!=node2]"',)
    # OpenPBS refuses `host!=` in a select ("Illegal attribute or resource value"): none
    assert get_dialect("pbs").exclusion_directives(hosts) == ()
    assert [get_dialect(s).excludes_hosts for s in ("slurm", "sge", "lsf", "pbs")] == [
        True, True, True, False]
    assert all(get_dialect(s).exclusion_directives([]) == () for s in ("slurm", "sge", "lsf"))


@pytest.mark.parametrize("scheduler", ["slurm", "sge", "lsf", "pbs"])
@pytest.mark.parametrize("bad", ["node1,node2", "node 1", "-x", "a&!b", "n]", "", "é"])
def test_a_host_name_that_is_not_one_is_refused_naming_the_field(scheduler, bad):
    with pytest.raises(ValueError, match=r"^host=.* is not a host name"):
        get_dialect(scheduler).exclusion_directives([bad])


def _sge_hosts(line: str) -> list[str]:
    match = re.fullmatch(r"-l h=((?:![A-Za-z0-9._-]+)(?:&![A-Za-z0-9._-]+)*)", line)
    return [h[1:] for h in match.group(1).split("&")]


def _lsf_hosts(line: str) -> list[str]:
    # one option, its value one double-quoted string (tests/integration/test_directive_parse.py)
    match = re.fullmatch(r'-R "select\[([^"\\$`\]]*)\]"', line)
    return [re.fullmatch(r"hname!=(\S+)", t).group(1) for t in match.group(1).split(" && ")]


@settings(max_examples=60, deadline=None)
@given(hosts=st.lists(HOST, min_size=1, max_size=6))
def test_every_exclusion_line_parses_back_to_the_hosts(hosts):
    want = sorted(set(hosts))
    (slurm,) = get_dialect("slurm").exclusion_directives(hosts)
    assert slurm.startswith("--exclude=") and slurm[10:].split(",") == want
    (sge,) = get_dialect("sge").exclusion_directives(hosts)
    assert _sge_hosts(sge) == want
    (lsf,) = get_dialect("lsf").exclusion_directives(hosts)
    assert _lsf_hosts(lsf) == want


# ---------------------------------------------------------------------- decisions
def test_the_failed_host_is_read_from_the_network_check_line():
    assert failed_hosts([DOWN], ["node2"]) == {"node2": DOWN.split(": ", 1)[1]}
    # the node's host name is not the scheduler's name for it (4 nodes of one host here)
    assert list(failed_hosts([DOWN.replace("node2", "vm")], ["node4"])) == ["node4"]
    assert failed_hosts([DOWN], ["node1", "node3"]) == {} and failed_hosts([DOWN], []) == {}
    reach = ("NetworkCheckError: host node3 cannot reach the scheduler at 10.78.0.10:8786 "
             "(Network is unreachable; ...)")
    assert list(failed_hosts(["ValueError: x", reach], ["node3.cluster"])) == ["node3.cluster"]
    assert failed_hosts(["RuntimeError: host node3 is busy"], ["node3"]) == {}


def test_a_host_that_the_scheduler_names_otherwise_is_matched_by_its_address():
    """OpenPBS names this machine's mom ``<host>-pbs`` (tests/schedulers/pbs/start), on the
    host's own address: a worker's line names the host, the job's nodes the mom. Here with
    the machine's own resolver: ``localhost`` is the node ``127.0.0.1`` of a two-node job."""
    line = DOWN.replace("node2", "localhost")
    assert failed_hosts([line], ["127.0.0.1", "gpu7.invalid"]) == {"127.0.0.1": line.split(": ", 1)[1]}
    assert failed_hosts([line], ["gpu6.invalid", "gpu7.invalid"]) == {}  # no address: no guess


def test_an_exclusion_lasts_its_time_or_the_clusters_life():
    kept, new = excluded_after((), {"node2": "down"}, 10.0, 60)
    assert new == (Exclusion("node2", "down", 10.0, 70.0),) and kept == new
    assert excluded_after(kept, {"node2": "down"}, 69.0, 60) == (kept, ())  # no second line
    again, new = excluded_after(kept, {"node2": "down"}, 70.0, 60)  # ran out: excluded anew
    assert [e.since for e in again] == [70.0] and new == again
    life, _ = excluded_after((), {"node2": "down"}, 10.0, None)
    assert life[0].until is None and life[0].active(10.0**9)
    assert excluded_after((), {"node2": "down"}, 10.0, False) == ((), ())


def test_the_keyword_and_its_config_key_are_checked_naming_the_field():
    import dask

    assert exclusion_policy(True) is None and exclusion_policy("10 minutes") == 600
    assert exclusion_policy("off") is False and exclusion_policy(False) is False
    for bad in ("soon", "auto", -5):
        with pytest.raises(ValueError, match=rf"^exclude_failed_hosts={bad!r} is not understood"):
            exclusion_policy(bad)
    with pytest.raises(TypeError, match=r"^exclude_failed_hosts=\['x'\] is a list: give True"):
        exclusion_policy(["x"])
    with dask.config.set({"hpcgpu.exclude-failed-hosts": "90s"}):
        assert exclusion_policy(None) == 90
    with dask.config.set({"hpcgpu.exclude-failed-hosts": "nope"}), \
            pytest.raises(ValueError, match="exclude_failed_hosts='nope'"):
        exclusion_policy(None)


def test_the_down_link_message_says_so_instead_of_advising_the_interface_given():
    message = link_problem("ib0", "node2", "lowerlayerdown")
    assert message.startswith("interface 'ib0' on host node2 is down (link state lowerlayerdown)")
    assert "interface='ib0'" not in message and "excluded" not in message
    assert link_problem(None, "node2", "down") is None


# ---------------------------------------------------------------------- the cluster's parts
class FakeJob:
    def __init__(self, scheduler=None, name=None, **options):
        self.name, self.options, self.job_id, self.closed = name, options, None, False

    async def close(self):
        self.closed = True


def fleet_of(tmp_path, dialect=get_dialect("slurm"), arrays=False):
    setup = prepare("slurm", {"gpus_per_node": 1, "log_directory": str(tmp_path), "job_name": "w"})
    fleet = JobFleet(lambda n: f"c-{n}", arrays=JobArrays(ArraySettings(arrays), dialect))
    fleet.add_pool(Pool("default", setup, None, {"cls": FakeJob, "options": {}}))
    return fleet


def running(fleet, name, job_id, node, started=None):
    fleet._records[name] = JobRecord(name, 1, job_id=job_id, phase=JobState.RUNNING, state="running",
                                     nodes=(node,), started=started or time.monotonic())
    fleet.jobs[name] = job = FakeJob(name=name)
    job.job_id = job_id


def monitor_of(fleet, dialect=get_dialect("slurm")):
    return JobMonitor(fleet, dialect, poll_interval=0.0, tail_lines=3, max_failed_jobs=3,
                      reconcile=lambda: None)


def test_a_failed_network_check_on_a_host_keeps_the_next_jobs_off_it(tmp_path, commands, caplog):
    fleet = fleet_of(tmp_path)
    fleet.scale_to(2, "default", dict, lambda: True)
    running(fleet, "c-0", "41", "node2")  # failed within seconds: "at once", but on that host
    running(fleet, "c-1", "42", "node1")
    (tmp_path / "w-41.err").write_text(f"start\n{DOWN}\n")
    commands.answers["squeue"] = (0, "41|FAILED|node2|NonZeroExitCode\n42|RUNNING|node1|None\n")
    commands.answers["scontrol"] = (0, "JobState=FAILED ExitCode=1:0\n")
    monitor = monitor_of(fleet)
    with caplog.at_level("WARNING", logger="hpcgpu.cluster"):
        asyncio.run(monitor.poll())
    # one line naming host and interface state; replaced, not given up
    (line,) = [r.getMessage() for r in caplog.records if "excluded from new jobs" in r.getMessage()]
    assert line.startswith("host node2 excluded from new jobs for the cluster's life: a worker of "
                           "job c-0 (id 41) failed the network check there: interface 'ib0' on "
                           "host node2 is down (link state down)"), line
    assert not monitor.gave_up and list(fleet.spec) == ["c-1", "c-2"]
    jobs = asyncio.run(fleet.make_jobs("tcp://s:1", ["c-2"]))
    assert jobs["c-2"].options["job_extra_directives"] == ["--exclude=node2"]
    assert fleet.records["c-2"].excluded == ("node2",) and fleet.records["c-1"].excluded == ()
    table = format_table(fleet.table())
    assert table.splitlines()[0].endswith("excluding") and table.splitlines()[-1].endswith("node2")


@pytest.mark.parametrize("scheduler, status, ended, fixture, host", [
    ("slurm", "squeue", "scontrol", "slurm-22.05-scontrol-show-job-failed.txt", "node3"),
    ("sge", "qstat", "qacct", "sge-8.1.9-qacct-exit5.txt", "vm"),  # qstat lists no ended job
])
def test_a_job_that_failed_between_two_polls_is_excluded_by_the_host_its_end_names(
        tmp_path, commands, caplog, scheduler, status, ended, fixture, host):
    """No poll saw it running, so only the scheduler's record of its end (``scontrol show
    job``, ``qacct -j``) says where it ran: without that host its failure read as one "at
    once", and the replacing stopped (seen in CI: Grid Engine, a prologue that exits at once)."""
    dialect = get_dialect(scheduler)
    fleet = fleet_of(tmp_path, dialect)
    fleet.scale_to(1, "default", dict, lambda: True)
    fleet._records["c-0"] = record = JobRecord("c-0", 1, job_id="41", phase=JobState.PENDING,
                                               state="pending", submitted=time.monotonic() - 5)
    fleet.jobs["c-0"] = job = FakeJob(name="c-0")
    job.job_id = "41"
    monitor = monitor_of(fleet, dialect)
    line = DOWN.replace("node2", host)
    with open(monitor.error_log(record), "w") as log:
        log.write(f"{line}\n")
    commands.answers[status] = (0, "")
    commands.answers[ended] = (0, (DATA / fixture).read_text())
    with caplog.at_level("WARNING", logger="hpcgpu.cluster"):
        asyncio.run(monitor.poll())
    assert fleet.records["c-0"].nodes == (host,) and fleet.records["c-0"].state == "failed"
    assert fleet.exclusions.hosts() == (host,), caplog.text
    assert not monitor.gave_up and list(fleet.spec) == ["c-1"], caplog.text


def test_a_job_that_failed_at_once_for_another_reason_still_stops_the_replacing(tmp_path, commands):
    fleet = fleet_of(tmp_path)
    fleet.scale_to(1, "default", dict, lambda: True)
    running(fleet, "c-0", "41", "node2")
    (tmp_path / "w-41.err").write_text("ImportError: no module named x\n")
    commands.answers["squeue"] = (0, "41|FAILED|node2|NonZeroExitCode\n")
    commands.answers["scontrol"] = (0, "JobState=FAILED ExitCode=1:0\n")
    monitor = monitor_of(fleet)
    asyncio.run(monitor.poll())
    assert monitor.failed_at_once and fleet.exclusions.hosts() == ()


def test_an_exclusion_ends_after_its_time(tmp_path):
    fleet = fleet_of(tmp_path)
    fleet.exclusions.policy = 30
    fleet.exclusions.note([DOWN], ["node2"], now=time.monotonic() - 31)  # excluded 31 s ago, for 30 s
    fleet.grow(1)
    jobs = asyncio.run(fleet.make_jobs("tcp://s:1", ["c-0"]))
    assert "job_extra_directives" not in jobs["c-0"].options and fleet.records["c-0"].excluded == ()
    fleet.exclusions.note([DOWN], ["node2"])
    fleet.grow(1)
    jobs = asyncio.run(fleet.make_jobs("tcp://s:1", ["c-1"]))
    assert jobs["c-1"].options["job_extra_directives"] == ["--exclude=node2"]


def test_an_array_of_replacements_excludes_the_host_too(tmp_path, commands):
    from hpcgpu.cluster.batch.job import GPUJob

    setup = prepare("slurm", {"gpus_per_node": 1, "log_directory": str(tmp_path)})
    fleet = JobFleet(lambda n: f"c-{n}", arrays=JobArrays(ArraySettings(True), get_dialect("slurm")))
    fleet.add_pool(Pool("default", setup, None, {"cls": GPUJob, "options": setup.job_options}))
    fleet.exclusions.note([DOWN], ["node2"])
    fleet.grow(3)
    commands.answers["scontrol"] = (0, "MaxArraySize            = 100\n")
    jobs = asyncio.run(fleet.make_jobs("tcp://s:1", ["c-0", "c-1", "c-2"]))
    script = jobs["c-0"].submission.template.job_script()
    assert "#SBATCH --array=0-2" in script and "#SBATCH --exclude=node2\n" in script


class NoExclusionDialect(SlurmDialect):
    """SLURM's words, without an exclusion request (as PBS)."""

    excludes_hosts = False

    def exclusion_directives(self, hosts):
        return ()


def test_without_an_exclusion_request_a_job_on_an_excluded_host_is_cancelled(tmp_path, commands):
    dialect = NoExclusionDialect()
    fleet = fleet_of(tmp_path, dialect)
    fleet.exclusions.note([DOWN], ["node2"])
    fleet.scale_to(1, "default", dict, lambda: True)
    running(fleet, "c-0", "50", "node1")
    fleet._records["c-0"] = JobRecord("c-0", 1, job_id="50", phase=JobState.PENDING, state="pending")
    commands.answers["squeue"] = (0, "50|RUNNING|node2|None\n")
    monitor = monitor_of(fleet, dialect)
    asyncio.run(monitor.poll())
    assert ["scancel", "50"] in commands.ran and list(fleet.spec) == ["c-1"]
    (failure,) = monitor.failures
    assert failure == ("job c-0 (id 50) started on excluded host(s) node2 (slurm has no request that "
                       "keeps a job off a host): cancelled before its workers start (a failed start: "
                       "max_failed_jobs)")
    commands.answers["squeue"] = (0, "51|RUNNING|node1|None\n")  # elsewhere: left alone
    running(fleet, "c-1", "51", "node1")
    asyncio.run(monitor.poll())
    assert ["scancel", "51"] not in commands.ran
    # a scheduler that keeps choosing the excluded host: bounded by max_failed_jobs (3)
    for job_id in ("52", "53"):
        name = next(n for n in fleet.spec if n not in fleet.records or n == "c-1")
        fleet._records[name] = JobRecord(name, 1, job_id=job_id, phase=JobState.PENDING, state="pending")
        fleet.jobs[name] = FakeJob(name=name)
        commands.answers["squeue"] = (0, f"{job_id}|RUNNING|node2|None\n")
        asyncio.run(monitor.poll())
    assert len(monitor.failures) == 3 and monitor.gave_up, monitor.failures


def test_the_same_failure_on_a_second_host_reads_as_the_configuration(tmp_path, commands):
    from hpcgpu.cluster.batch.progress import _network_only

    fleet = fleet_of(tmp_path)
    fleet.scale_to(2, "default", dict, lambda: True)
    running(fleet, "c-0", "41", "node1")
    running(fleet, "c-1", "42", "node2")
    for job_id, node in (("41", "node1"), ("42", "node2")):
        (tmp_path / f"w-{job_id}.err").write_text(DOWN.replace("node2", node) + "\n")
    commands.answers["squeue"] = (0, "41|FAILED|node1|NonZeroExitCode\n42|FAILED|node2|NonZeroExitCode\n")
    commands.answers["scontrol"] = (0, "JobState=FAILED ExitCode=1:0\n")
    monitor = monitor_of(fleet)
    asyncio.run(monitor.poll())
    assert fleet.exclusions.hosts() == ("node1", "node2") and monitor.failed_at_once
    # waiting for workers: one such failure waits for the replacement, two end the wait
    assert not _network_only(monitor.failures[:1], fleet) and _network_only(monitor.failures, fleet)
    assert _network_only(monitor.failures[:1], fleet_of(tmp_path))  # nothing excluded


# ---------------------------------------------------------------------- a link lost mid-run
class Identity:
    """A scheduler apart as the cluster's comm reaches it: ``identity()``'s worker infos."""

    def __init__(self, infos):
        self.infos = infos

    async def identity(self):
        return {"workers": {a: dict(info) for a, info in self.infos.items()}}


@pytest.mark.parametrize("apart", [False, True], ids=["in-process", "scheduler-apart"])
def test_silent_workers_are_said_once_with_the_link_line_of_their_log(tmp_path, commands, apart):
    """A scheduler in the cluster's process is read directly; one in a process of its own on
    this host (UCX) through its ``identity()``, each poll."""
    fleet = fleet_of(tmp_path)
    running(fleet, "c-0", "41", "node2")
    running(fleet, "c-1", "42", "node1")
    fleet.spec.update({"c-0": {}, "c-1": {}})
    now = time.time()
    infos = {"a": {"name": "c-0-0-0", "host": "10.78.0.12", "last_seen": now - 12},
             "b": {"name": "c-1-0-0", "host": "10.78.0.11", "last_seen": now - 0.3}}
    if apart:
        source = lambda: heartbeat_source(SimpleNamespace(same_clock=True), Identity(infos))  # noqa: E731
    else:
        source = lambda: SimpleNamespace(workers={a: SimpleNamespace(**i) for a, i in infos.items()})  # noqa: E731
    (tmp_path / "w-41.err").write_text(DOWN + "\n")
    commands.answers["squeue"] = (0, "41|RUNNING|node2|None\n42|RUNNING|node1|None\n")
    monitor = JobMonitor(fleet, get_dialect("slurm"), poll_interval=0.0, tail_lines=3,
                         max_failed_jobs=3, scheduler=source)
    asyncio.run(monitor.poll())
    asyncio.run(monitor.poll())
    (event,) = monitor.events
    assert event.startswith("job c-0 (id 41) on node2 (10.78.0.12): no heartbeat from its worker(s) "
                            "c-0-0-0 for 12 s: interface 'ib0' on host node2 is down"), event
    infos["a"]["last_seen"] = time.time()  # heard again, then quiet again: said again
    asyncio.run(monitor.poll())
    infos["a"]["last_seen"] = time.time() - 20
    (tmp_path / "w-41.err").write_text("")
    asyncio.run(monitor.poll())
    assert len(monitor.events) == 2 and "may have lost its network" in monitor.events[1]


def test_the_worker_says_a_lost_link_once_in_its_log(capsys):
    from hpcgpu.worker.linkwatch import watch_link

    states = iter(["up", "up", "down", "down", "down", "up"] + ["up"] * 100)
    thread = watch_link("ib0", interval=0.01, read=lambda _: next(states))
    time.sleep(0.3)
    thread.stop.set()
    thread.join(5)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("NetworkCheckError: interface 'ib0' on host ")
    assert " is down (link state down)" in err[0] and err[1].endswith(" is up again")
    assert watch_link(None) is None and watch_link("ib9", read=lambda _: None) is None


def test_the_worker_check_says_its_interface_is_down(monkeypatch):
    from hpcgpu.worker import reach

    monkeypatch.setattr(reach, "host_interfaces", lambda: {"eth0": ["10.77.0.12"], "ib0": ["10.78.0.12"]})
    monkeypatch.setattr(reach, "link_state", lambda name: "down" if name == "ib0" else "up")
    monkeypatch.setattr(reach.socket, "gethostname", lambda: "node2")
    with pytest.raises(reach.NetworkCheckError) as caught:
        reach.check_worker_network("tcp://10.78.0.10:8786", "ib0", timeout=0.1)
    assert str(caught.value).startswith("interface 'ib0' on host node2 is down (link state down): "
                                        "this host lost its network")
    assert "interface='" not in str(caught.value)
