"""Job arrays in each scheduler's words: directives, element ids and element indices.

One array job of ``count`` elements replaces ``count`` identical submissions. Each element is
one job of the usual shape; its id joins the array's id and the element's index the way the
scheduler prints it (``123_4`` SLURM, ``123.4`` Grid Engine, ``123[4].server`` PBS Pro,
``123[4]`` LSF), so the status, cancel and exit-code commands take it as it is.
All functions here are pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpcgpu.schedulers.registry import get_scheduler, schedulers

__all__ = ["ArrayRequest", "array_directives",
           "element_index", "element_name", "element_job_id", "expand_indices",
           "name_template"]

_TEMPLATE = re.compile(r"\{array_index([+-]\d+)?\}")


def __getattr__(name: str) -> Any:
    """``FIRST_INDEX`` and ``INDEX_VARIABLES``: scheduler -> its first index, its index
    variable, for every registered scheduler with job arrays (read from the registry)."""
    if name == "FIRST_INDEX":
        return {s.name: s.first_array_index for s in schedulers() if s.has_arrays}
    if name == "INDEX_VARIABLES":
        return {s.name: s.array_index_variable for s in schedulers() if s.has_arrays}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ArrayRequest:
    """An array of ``count`` elements, at most ``throttle`` of them running at once.

    >>> ArrayRequest("slurm", 6, throttle=4).indices
    range(0, 6)
    >>> ArrayRequest("sge", 1)
    Traceback (most recent call last):
    ...
    ValueError: an array job needs at least 2 elements, not count=1
    """

    scheduler: str
    count: int
    throttle: int | None = None

    def __post_init__(self) -> None:
        if self.count < 2:
            raise ValueError(f"an array job needs at least 2 elements, not count={self.count}")
        if self.throttle is not None and self.throttle < 1:
            raise ValueError(f"array_throttle={self.throttle!r} must be at least 1 (or None)")

    @property
    def first(self) -> int:
        first = get_scheduler(self.scheduler).first_array_index
        if first is None:
            raise ValueError(f"scheduler={self.scheduler!r} has no job arrays here")
        return first

    @property
    def indices(self) -> range:
        return range(self.first, self.first + self.count)


def array_directives(request: ArrayRequest, job_name: str,
                     log_directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(skip, extra)``: substrings of the usual directives to drop, and the array's own
    directives (without prefix) that replace them, e.g. per-element log files.

    Examples
    --------
    >>> array_directives(ArrayRequest("slurm", 6, 4), "hpcgpu", "logs")[1]
    ('--array=0-5%4', '--output=logs/%x-%A_%a.out', '--error=logs/%x-%A_%a.err')
    >>> array_directives(ArrayRequest("sge", 6, 2), "hpcgpu", "logs")
    ((), ('-t 1-6', '-tc 2'))
    >>> array_directives(ArrayRequest("pbs", 3), "hpcgpu", "logs")
    ((), ('-J 0-2',))
    >>> array_directives(ArrayRequest("lsf", 3, 2), "hpcgpu", "logs")[1]
    ('-J "hpcgpu[1-3]%2"', '-o logs/%J_%I.out', '-e logs/%J_%I.err')
    """
    return get_scheduler(request.scheduler).array_directives(request, job_name, log_directory)


def element_job_id(scheduler: str, array_id: str, index: int) -> str:
    """The id of element ``index`` of the array ``array_id``, as the scheduler prints it.

    >>> [element_job_id(s, i, 4) for s, i in
    ...  [("slurm", "123"), ("sge", "123"), ("pbs", "123[].pbs01"), ("lsf", "123")]]
    ['123_4', '123.4', '123[4].pbs01', '123[4]']
    """
    return get_scheduler(scheduler).element_job_id(array_id, index)


def element_index(scheduler: str, job_id: str) -> tuple[str, int | None]:
    """``(array id, index)`` of an element id; ``(job_id, None)`` for a plain job.

    >>> element_index("slurm", "123_4"), element_index("sge", "123.4")
    (('123', 4), ('123', 4))
    >>> element_index("pbs", "123[4].pbs01"), element_index("lsf", "77")
    (('123[].pbs01', 4), ('77', None))
    """
    return get_scheduler(scheduler).element_index(job_id)


def expand_indices(text: str) -> list[int]:
    """Indices from a range list as squeue and qstat print them.

    >>> expand_indices("4-5%4"), expand_indices("1-7:2"), expand_indices("3,5,8-9")
    ([4, 5], [1, 3, 5, 7], [3, 5, 8, 9])
    """
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        out += range(int(low), int(high or low) + 1, int(step or 1))
    return out


def name_template(prefix: str, first_number: int, first_index: int) -> str:
    """The worker name prefix an array's script carries: its element with index ``i`` takes
    the cluster name ``<prefix>-<first_number + i - first_index>``.

    >>> name_template("SLURMCluster", 7, 0), name_template("SGECluster", 3, 1)
    ('SLURMCluster-{array_index+7}', 'SGECluster-{array_index+2}')
    """
    return f"{prefix}-{{array_index{first_number - first_index:+d}}}"


def element_name(name: str | None, env: Mapping[str, str]) -> str | None:
    """The worker name prefix of this element: ``name`` with ``{array_index+N}`` resolved
    from the scheduler's index variable (``name`` unchanged when it holds no template).

    >>> element_name("c-{array_index+7}", {"SLURM_ARRAY_TASK_ID": "2"})
    'c-9'
    >>> element_name("c-{array_index-1}", {"SGE_TASK_ID": "3"}), element_name("c-3", {})
    ('c-2', 'c-3')
    >>> element_name("c-{array_index+0}", {})
    Traceback (most recent call last):
    ...
    ValueError: worker name 'c-{array_index+0}' needs an array index, but none of \
SLURM_ARRAY_TASK_ID, PBS_ARRAY_INDEX, LSB_JOBINDEX, SGE_TASK_ID is set
    """
    if not name or not _TEMPLATE.search(name):
        return name
    variables = [s.array_index_variable for s in schedulers() if s.array_index_variable]
    index = next((int(env[v]) for v in variables if str(env.get(v, "")).isdigit()), None)
    if index is None:
        raise ValueError(f"worker name {name!r} needs an array index, but none of "
                         f"{', '.join(variables)} is set")
    return _TEMPLATE.sub(lambda m: str(index + int(m.group(1) or 0)), name)
