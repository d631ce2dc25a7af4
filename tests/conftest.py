"""Shared fixtures: the real local SLURM, Grid Engine and OpenPBS that scripts/test starts.

Real-scheduler tests skip, with the reason, only where they cannot run (not Linux, not
root, or the set-up was not run). Under CI=true a missing scheduler is an error.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import dask
import pytest
from hypothesis import settings



from site_faults import wait_until

#: A job-state move the cluster does not allow raises in the tests (in use: a warning naming
#: the job); hpcgpu.cluster.batch.job_state. In the environment too: it outlives a test's
#: dask.config.refresh() and reaches the clusters that tests start in other processes.
os.environ["DASK_HPCGPU__CLUSTER__STRICT_JOB_STATES"] = "True"
dask.config.set({"hpcgpu.cluster.strict-job-states": True})

#: Hypothesis: under CI=true each property test checks the same examples on every run (a
#: fixed seed), so that a run's outcome is the code's, not the draw's (a search that found a
#: new counter-example once failed a CI by chance: #39); elsewhere it searches anew each run.
#: HYPOTHESIS_PROFILE=explore in CI searches too.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "explore"))

ROOT = Path(__file__).resolve().parents[1]

#: the schedulers' set-up files: a PBS hook (fakegpu.py imports PBS's own ``pbs`` module), no tests
collect_ignore = ["schedulers"]


def _unavailable(probe: list[str], name: str) -> str | None:
    if platform.system() != "Linux":
        return f"{name} tests need Linux"
    if os.geteuid() != 0 and shutil.which(probe[0]) is None:
        return f"{name} tests need root to install and start {name} (scripts/setup-schedulers)"
    if shutil.which(probe[0]) is None:
        return f"{probe[0]} not found: run scripts/setup-schedulers (bash scripts/test does)"
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"{name} is not answering ({' '.join(probe)}: {done.stderr.strip()}): run scripts/setup-schedulers"
    return None


def _require(probe: list[str], name: str) -> None:
    reason = _unavailable(probe, name)
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real {name} tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm() -> None:
    """The real local SLURM (4 fake nodes x 4 fake GPUs)."""
    _require(["sinfo", "-h"], "SLURM")


@pytest.fixture(scope="session")
def sge() -> None:
    """The real local Grid Engine (8 slots, consumable 'gpu' complex with 4)."""
    _require(["qstat"], "Grid Engine")


#: Where OpenPBS keeps its commands (tests/schedulers/pbs/start): not on PATH, since Grid
#: Engine's qsub/qstat/qdel (/usr/bin) have the same names. PBS tests put it first, as a PBS
#: site's user has it, with the ``pbs`` fixture.
PBS_BIN = "/opt/pbs/bin"


@pytest.fixture(scope="session")
def pbs_server() -> None:
    """The real local OpenPBS 23.06.06 (2 vnodes x 4 fake GPUs as ``ngpus``)."""
    _require([f"{PBS_BIN}/qstat", "-B"], "OpenPBS")


@pytest.fixture
def pbs(pbs_server, monkeypatch) -> None:
    """PBS's commands first on PATH for this test (undone after the fixtures that came later,
    so clusters made in the test cancel their jobs with PBS's qdel, not Grid Engine's)."""
    monkeypatch.setenv("PATH", f"{PBS_BIN}{os.pathsep}{os.environ['PATH']}")


def wait_for(predicate, timeout: float, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s
    (:func:`site_faults.wait_until`, which the soak script shares, as a test failure)."""
    try:
        return wait_until(predicate, timeout, interval, what)
    except TimeoutError as error:
        raise AssertionError(str(error)) from None


def gpus_per_node(places) -> dict:
    """``{node: number of distinct GPUs}`` from ``(node, gpu)`` pairs, one per worker.

    Fails when two workers of a node share a GPU.
    """
    seen: dict = {}
    for node, gpu in places:
        assert gpu not in seen.setdefault(node, set()), f"two workers on GPU {gpu} of node {node}"
        seen[node].add(gpu)
    return {node: len(gpus) for node, gpus in seen.items()}


@pytest.fixture
def clusters(tmp_path):
    """``clusters(cls, **options)`` makes a cluster logging under ``tmp_path``; all are closed
    at the end of the test."""
    made = []

    def make(cls, **options):
        cluster = cls(log_directory=str(tmp_path / "logs"), **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture
def fake_submit():
    """Submit commands answer with job ids and nothing runs; (argv, stdin) are recorded."""
    from hpcgpu.system import commands

    calls, ids = [], iter(range(1000, 2000))

    def runner(argv, timeout, input):
        calls.append((list(argv), input))
        out = ""
        if argv[0] in ("sbatch", "qsub"):
            out = f"{next(ids)}\n"
        elif argv[0] == "bsub":
            out = f"Job <{next(ids)}> is submitted to queue <normal>.\n"
        return commands.CommandResult(tuple(argv), 0, out, "")

    commands.set_runner(runner)
    yield calls
    commands.set_runner(None)

#: Tests that must not overlap with others of their group when pytest-xdist runs tests in
#: parallel (scripts/test: ``-n 4 --dist loadgroup``): each group runs in one worker, in turn.
#: ``ucx``: two UCX clusters started at once on one host fail to connect their workers
#: (tried: two runs of tests/unit/test_ucx.py at once, both time out; each alone passes).
#: ``site``: the site's faults cut links, kill hosts and restart its slurmctld.
#: ``sge``: the local Grid Engine has 4 GPUs (its ``gpu`` complex): tests that ask for them all
#: wait on each other's jobs (tried: two at once time out waiting for their elements).
SERIAL_GROUPS = {
    "ucx": ("test_ucx.py", "test_ucxauth.py", "test_cluster_ucx.py", "test_batch_ucx.py",
            "test_ucxauth_batch.py", "test_comms_benchmark.py", "test_ucx_advice.py", "test_ucx_idle.py"),
}


def _serial_group(item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        return marker.args[0] if marker.args else marker.kwargs.get("name")
    if item.get_closest_marker("site") is not None:
        return "site"
    if "sge" in getattr(item, "fixturenames", ()):
        return "sge"
    if "pbs_server" in getattr(item, "fixturenames", ()):
        return "pbs"  # as Grid Engine: 2 vnodes x 4 GPUs, tests that fill them would wait
    return next((group for group, files in SERIAL_GROUPS.items() if item.path.name in files), None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        group = groups[item.nodeid] = _serial_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    # The serial groups first: each runs in one worker from start to end, so started last it
    # would be the run's tail; then the integration tests (long waits on schedulers), and the
    # unit tests, short, fill the workers' ends.
    items.sort(key=lambda item: (groups[item.nodeid] is None, item.path.parent.name == "unit"))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """After tests/unit/test_docs.py ran blocks: every code block of README.md and docs/ and
    what the docs test did with it (ran, parsed, or only checked, and why). Here, in the root
    conftest, so that the summary is printed by pytest-xdist's controller too."""
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])]
    if not any("test_docs.py::test_python_block" in getattr(r, "nodeid", "") for r in reports):
        return
    from docblocks import blocks_of, inventory, pages

    blocks = [block for page in pages() for block in blocks_of(page)]
    terminalreporter.section("code blocks of README.md and docs/: ran, parsed, or checked only (why)")
    for line in inventory(blocks):
        terminalreporter.write_line(line)
