"""Job arrays: a scale-up of N identical jobs is ONE submission of an N-element array.

Each element stays what a job is everywhere else in the cluster: one entry of
``worker_spec``, one :class:`~hpcgpu.cluster.batch.job_table.JobRecord`, one
:class:`ArrayElementJob` whose id is the element's (``123_4``, ``123.4``, ``123[4]``). So
job states, retirement (``scancel 123_4``, ``qdel 123.4``), walltime replacement and lost-job
recovery work per element unchanged. Only submission is shared: the new spec entries that
:meth:`JobArrays.make_jobs` receives together, with consecutive numbers, become one array
whose script names its workers from the element index (``{array_index+N}``, resolved by
``hpcgpu.worker``). A site limit (SLURM's ``MaxArraySize``, Grid Engine's ``max_aj_tasks``)
is read once, or given, and larger scale-ups become several arrays.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from distributed.deploy.spec import ProcessInterface

from hpcgpu.system import commands, config
from hpcgpu.cluster.batch.job import GPUJob
from hpcgpu.schedulers.arrays import ArrayRequest, array_directives, element_job_id, name_template
from hpcgpu.schedulers.registry import get_scheduler

__all__ = ["ArraySettings", "ArrayElementJob", "ArraySubmission", "JobArrays",
           "consecutive_runs", "parse_site_limit", "run_fits"]

logger = logging.getLogger("hpcgpu.cluster")


@dataclass(frozen=True)
class ArraySettings:
    """Whether and how to submit arrays.

    >>> ArraySettings.create(None, None, None).enabled
    True
    >>> ArraySettings.create(False, None, None).enabled
    False
    >>> ArraySettings.create(True, 1, None)
    Traceback (most recent call last):
    ...
    ValueError: max_array_size=1 must be a whole number of at least 2 (or None: the site's limit)
    """

    enabled: bool = True
    max_size: int | None = None
    throttle: int | None = None

    @classmethod
    def create(cls, job_arrays: Any, max_array_size: Any, array_throttle: Any) -> "ArraySettings":
        enabled = config.get("job-arrays", True) if job_arrays is None else job_arrays
        size = config.get("max-array-size") if max_array_size is None else max_array_size
        throttle = config.get("array-throttle") if array_throttle is None else array_throttle
        if not isinstance(enabled, bool):
            raise ValueError(f"job_arrays={enabled!r} must be True or False")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 2):
            raise ValueError(f"max_array_size={size!r} must be a whole number of at least 2 "
                             "(or None: the site's limit)")
        if throttle is not None and (isinstance(throttle, bool) or not isinstance(throttle, int)
                                     or throttle < 1):
            raise ValueError(f"array_throttle={throttle!r} must be a whole number of at least 1 "
                             "(or None: no limit)")
        return cls(enabled, size, throttle)


def parse_site_limit(scheduler: str, output: str) -> int | None:
    """The most elements one array may have, from the scheduler's configuration output.

    >>> parse_site_limit("slurm", "MaxArraySize            = 1001\\nMaxJobCount = 10000")
    1001
    >>> parse_site_limit("sge", "max_aj_instances 2000\\nmax_aj_tasks 0"), parse_site_limit("pbs", "")
    (None, None)
    """
    return get_scheduler(scheduler).parse_array_limit(output)  # Grid Engine: 0 is no limit


def consecutive_runs(names: list[str], longest: int | None) -> list[list[str]]:
    """Split ``<prefix>-<n>`` names into runs of consecutive numbers, each at most
    ``longest`` long: each run can be one array.

    >>> consecutive_runs(["c-9", "c-10", "c-11", "c-13", "x"], None)
    [['c-9', 'c-10', 'c-11'], ['c-13'], ['x']]
    >>> consecutive_runs(["c-1", "c-2", "c-3", "c-4", "c-5"], 2)
    [['c-1', 'c-2'], ['c-3', 'c-4'], ['c-5']]
    """
    runs: list[list[str]] = []
    for name in sorted(names, key=_sort_key):
        last = runs[-1][-1] if runs else None
        if (last is not None and _number(last) is not None and _number(name) is not None
                and _prefix(last) == _prefix(name) and _number(name) == _number(last) + 1
                and (longest is None or len(runs[-1]) < longest)):
            runs[-1].append(name)
        else:
            runs.append([name])
    return runs


def run_fits(length: int, room: int | None, throttle: int | None,
             throttles: bool) -> tuple[bool, int | None, int]:
    """``(made now, its throttle, running room it takes)`` for a run of ``length`` new jobs
    (an array when longer than 1) with ``room`` jobs left to run (None: no cap), the user's
    ``throttle``, on a scheduler whose arrays take a throttle (``throttles``) or not.

    >>> run_fits(6, 2, None, True), run_fits(6, 8, 4, True), run_fits(6, None, None, True)
    ((True, 2, 2), (True, 4, 4), (True, None, 6))
    >>> run_fits(3, 2, None, False), run_fits(1, 0, None, True)
    ((False, None, 3), (False, None, 1))
    """
    if room is None:
        return True, throttle, length if throttle is None else min(throttle, length)
    if length == 1 or not throttles:
        return length <= room, throttle if throttles else None, length
    most = room if throttle is None else min(throttle, room)
    return most >= 1, (most if most < length else throttle), min(most, length)


def _number(name: str) -> int | None:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if "-" in name and tail.isdigit() else None


def _prefix(name: str) -> str:
    return name.rsplit("-", 1)[0]


def _sort_key(name: str) -> tuple:
    number = _number(name)
    return (_prefix(name), -1 if number is None else number, name)


class ArraySubmission:
    """One array job: ``template`` (a :class:`GPUJob` whose script carries the array
    directives and the worker-name template) is submitted once, by the first element that
    starts; the others wait for the same id."""

    def __init__(self, template: GPUJob, throttle: int | None = None) -> None:
        self.template, self.throttle = template, throttle  # most elements running at once
        self._task: asyncio.Future | None = None

    async def array_id(self) -> str:
        if self._task is None:
            self._task = asyncio.ensure_future(self._submit())
        return await asyncio.shield(self._task)

    async def _submit(self) -> str:
        await self.template.start()
        return str(self.template.job_id)


class ArrayElementJob(GPUJob):
    """One element of an array: a job like any other, but started by its array's one
    submission; its id is the element's."""

    def __init__(self, *args: Any, submission: ArraySubmission, index: int,
                 **kwargs: Any) -> None:
        self.submission, self.index = submission, index
        super().__init__(*args, **kwargs)

    async def start(self) -> None:
        array_id = await self.submission.array_id()
        self.job_id = element_job_id(self.dialect.name, array_id, self.index)
        await ProcessInterface.start(self)


class JobArrays:
    """Make the jobs of new spec entries of ``fleet``, several at once as array elements.

    ``settings``: whether and how to submit arrays; ``dialect``: the scheduler's words.
    The site's limit on array elements is read once, at the first array.
    """

    def __init__(self, settings: ArraySettings, dialect: Any) -> None:
        self.settings, self.dialect = settings, dialect
        self._limit: int | None = None
        self._limit_read = False

    async def make_jobs(self, address: str, names: list[str], fleet: Any,
                        rooms: dict[str, int | None] | None = None) -> dict[str, GPUJob]:
        """``name -> job`` for the new spec entries ``names`` of ``fleet`` (oldest first);
        nothing is submitted yet (the jobs' ``start`` does that, an array once for all its
        elements). ``rooms``: pool -> the most of its new jobs that may run at once (absent:
        no cap): arrays get a throttle within it, and what does not fit waits."""
        scheduler, spec = self.dialect.name, fleet.spec
        # One array per pool (its own spec and script), of GPU jobs only.
        arrays = [n for n in names if fleet.job_pool(n).spec is spec[n]
                  and fleet.job_pool(n).kind.arrays]
        single = (not self.settings.enabled or len(arrays) < 2
                  or not get_scheduler(scheduler).has_arrays)
        runs = [[name] for name in names if single or name not in arrays]
        if not single:
            runs += consecutive_runs(arrays, await self.site_limit())
        # the spec may have lost entries while the limit was read (the cluster closing at
        # the end of a script); the next reconciliation makes what is left of a run
        runs = [run for run in runs if all(name in spec for name in run)]
        jobs: dict[str, GPUJob] = {}
        rooms = dict(rooms or {})
        throttles = get_scheduler(scheduler).throttles_arrays
        for run in sorted(runs, key=lambda run: _sort_key(run[0])):
            pool = fleet.job_pool(run[0])
            fits, throttle, used = run_fits(len(run), rooms.get(pool.name), self.settings.throttle,
                                            throttles)
            if not fits:
                continue  # stays in the spec: the next reconciliation makes it
            if pool.name in rooms and rooms[pool.name] is not None:
                rooms[pool.name] -= used
            # hosts where a worker failed the network check: kept out in the scheduler's words
            options = fleet.exclusions.job_options(dict(spec[run[0]].get("options", {})), self.dialect)
            if len(run) == 1:
                jobs[run[0]] = spec[run[0]]["cls"](address, **{**options, "name": run[0]})
            else:
                jobs.update(self._array_jobs(address, run, options, pool, throttle))
        return jobs

    def _array_jobs(self, address: str, run: list[str], options: dict,
                    pool: Any, throttle: int | None) -> dict[str, GPUJob]:
        request = ArrayRequest(self.dialect.name, len(run), throttle)
        setup = pool.setup
        skip, extra = array_directives(request, setup.shape.job_name, setup.log_directory)
        template = pool.spec["cls"](address, **{
            **options, "name": name_template(_prefix(run[0]), _number(run[0]), request.first),
            "job_extra_directives": [*(options.get("job_extra_directives") or ()), *extra],
            "job_directives_skip": [*(options.get("job_directives_skip") or ()), *skip]})
        submission = ArraySubmission(template, throttle if get_scheduler(
            self.dialect.name).throttles_arrays else None)
        return {name: ArrayElementJob(address, **{**options, "name": name},
                                      submission=submission, index=index)
                for name, index in zip(run, request.indices)}

    async def site_limit(self) -> int | None:
        """The most elements of one array: ``max_array_size``, else the site's, read once."""
        if self.settings.max_size is not None:
            return self.settings.max_size
        if not self._limit_read:
            scheduler = get_scheduler(self.dialect.name)
            self._limit = scheduler.default_array_limit
            if scheduler.array_limit_query:
                done = await asyncio.to_thread(commands.run, list(scheduler.array_limit_query[0]),
                                               timeout=30, check=False)
                self._limit = scheduler.parse_array_limit(done.stdout)
            self._limit_read = True
            logger.info("at most %s elements per array job", self._limit or "unlimited")
        return self._limit
