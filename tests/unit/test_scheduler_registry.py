"""The scheduler and launcher registries: every built-in scheduler is complete, and a site
adds its own through an entry point without touching hpcgpu."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import hpcgpu.cluster
import hpcgpu.launchers as launchers
from hpcgpu.jobspec.dialects import DIALECTS, get_dialect
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.launchers.base import Launcher
from hpcgpu.schedulers import Scheduler, registry
from hpcgpu.schedulers.slurm.dialect import SlurmDialect


@pytest.mark.parametrize("name", list(registry.BUILTIN))
def test_every_builtin_scheduler_is_complete(name):
    scheduler = registry.get_scheduler(name)
    assert scheduler.name == name == scheduler.dialect_class.name
    assert scheduler.job_id_variable and not scheduler.in_job({})
    assert scheduler.batch_launcher in launchers.LAUNCHERS
    assert scheduler.dialect_class.default_launcher in launchers.LAUNCHERS
    assert isinstance(getattr(hpcgpu.cluster, scheduler.cluster_class), type)
    if scheduler.has_arrays:
        assert scheduler.array_index_variable
    lines = scheduler.dialect().directives(GPUJobShape.create(gpus_per_node=2), "logs")
    assert lines and all(line.startswith(scheduler.dialect_class.prefix + " ") for line in lines)


@dataclass(frozen=True)
class _SiteDialect(SlurmDialect):
    name: ClassVar[str] = "mysite"


class _Site(Scheduler):
    name = "mysite"
    dialect_class = _SiteDialect
    job_id_variable = "MYSITE_JOB"
    cluster_class = "SLURMCluster"


@dataclass(frozen=True)
class _Wrapper(Launcher):
    name: str = "mywrap"

    def task_argv(self, tasks, per_host, gpus, cpus):
        return ["mywrap", str(tasks)]


@pytest.fixture
def site_plugins(monkeypatch):
    """A site's package with a scheduler and a launcher, registered as entry points."""
    module = types.ModuleType("mysite_hpcgpu")
    module.SCHEDULER, module.WRONG, module.LAUNCHER = _Site(), object(), _Wrapper()
    monkeypatch.setitem(sys.modules, "mysite_hpcgpu", module)
    points = {
        registry.ENTRY_POINT_GROUP: [
            importlib.metadata.EntryPoint("mysite", "mysite_hpcgpu:SCHEDULER", registry.ENTRY_POINT_GROUP),
            importlib.metadata.EntryPoint("slurm", "mysite_hpcgpu:SCHEDULER", registry.ENTRY_POINT_GROUP),
            importlib.metadata.EntryPoint("broken", "mysite_hpcgpu:WRONG", registry.ENTRY_POINT_GROUP)],
        launchers.ENTRY_POINT_GROUP: [
            importlib.metadata.EntryPoint("mywrap", "mysite_hpcgpu:LAUNCHER", launchers.ENTRY_POINT_GROUP)],
    }
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **select: points.get(select.get("group"), []))
    for cache in (registry._locations, registry._load, launchers._site_launchers):
        cache.cache_clear()
    yield
    for cache in (registry._locations, registry._load, launchers._site_launchers):
        cache.cache_clear()


def test_a_site_adds_a_scheduler_and_a_launcher_through_entry_points(site_plugins):
    assert registry.scheduler_names()[:4] == ("slurm", "pbs", "lsf", "sge")
    assert "mysite" in registry.scheduler_names() and "mysite" in DIALECTS
    assert registry.get_scheduler("slurm").dialect_class is SlurmDialect  # built-ins stay
    assert get_dialect("mysite").prefix == "#SBATCH"
    assert registry.detect({"MYSITE_JOB": "3"}).name == "mysite"
    with pytest.raises(ValueError, match="is not a Scheduler named 'broken'"):
        registry.get_scheduler("broken")
    shape = GPUJobShape.create(nodes=2, gpus_per_node=4)
    assert launchers.get_launcher("mywrap").prefix(shape) == ["mywrap", "2"]
    assert "mywrap" in launchers.launcher_names()


def test_without_plugins_the_names_are_the_builtin_ones(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **select: [])
    registry._locations.cache_clear()
    try:
        assert registry.scheduler_names() == tuple(registry.BUILTIN)
        with pytest.raises(ValueError, match="scheduler='mysite' is not supported"):
            registry.get_scheduler("mysite")
    finally:
        registry._locations.cache_clear()


@pytest.mark.parametrize("name", list(registry.BUILTIN))
def test_a_cluster_class_line_names_its_scheduler_once(name):
    """``XCluster.job_cls`` follows from ``scheduler_name`` (dask-jobqueue's job class of the
    scheduler, GPUJob where it has none), for the built-in classes and for a new one."""
    from hpcgpu.cluster.batch.cpu_job import cpu_job_class
    from hpcgpu.cluster.batch.job import GPUJob
    from hpcgpu.cluster.batch.schedulers import GPUCluster

    scheduler = registry.get_scheduler(name)
    expected = GPUJob if scheduler.cpu_job is None else cpu_job_class(name)
    assert getattr(hpcgpu.cluster, scheduler.cluster_class).job_cls is expected
    mine = type("MineCluster", (GPUCluster,), {"scheduler_name": name})
    assert mine.job_cls is expected
    own = type("OwnCluster", (GPUCluster,), {"scheduler_name": name, "job_cls": int})
    assert own.job_cls is int and GPUCluster.job_cls is GPUJob


def test_docs_say_per_scheduler_what_is_tested_against_the_real_one():
    """docs/schedulers.md's table has one row per built-in scheduler (named as its cluster
    class is), each saying what it is tested against and what not."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "schedulers.md").read_text()
    section = text.split("## What is tested against the real scheduler", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in row.split("|")[1:-1]]
            for row in re.findall(r"^\|.*\|$", section, re.M)[2:]]
    assert all(len(row) == 3 and all(row) for row in rows), rows
    names = [registry.get_scheduler(n).cluster_class.removesuffix("Cluster").lower()
             for n in registry.BUILTIN]
    assert len(rows) == len(names)
    for name in names:
        assert sum(name in row[0].lower() for row in rows) == 1, (name, rows)
