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

__all__ = ["ArrayRequest", "FIRST_INDEX", "INDEX_VARIABLES", "array_directives",
           "element_index", "element_name", "element_job_id", "expand_indices",
           "name_template"]

#: The first element index each scheduler's range starts at here (``--array=0-K``, ``-t 1-K``,
#: ``-J 0-K``, ``name[1-K]``).
FIRST_INDEX = {"slurm": 0, "sge": 1, "pbs": 0, "lsf": 1}
#: The variable that tells an element its index.
INDEX_VARIABLES = {"slurm": "SLURM_ARRAY_TASK_ID", "sge": "SGE_TASK_ID",
                   "pbs": "PBS_ARRAY_INDEX", "lsf": "LSB_JOBINDEX"}
_TEMPLATE = re.compile(r"\{array_index([+-]\d+)?\}")


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
        return FIRST_INDEX[self.scheduler]

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
    first, last, limit = request.first, request.indices[-1], request.throttle
    if request.scheduler == "slurm":
        throttle = f"%{limit}" if limit else ""
        return (("--output=", "--error="),
                (f"--array={first}-{last}{throttle}", f"--output={log_directory}/%x-%A_%a.out",
                 f"--error={log_directory}/%x-%A_%a.err"))
    if request.scheduler == "sge":  # -o dir/: Grid Engine writes <name>.o<job>.<task> itself
        return (), (f"-t {first}-{last}",) + ((f"-tc {limit}",) if limit else ())
    if request.scheduler == "pbs":  # PBS Pro's -J has no throttle
        return (), (f"-J {first}-{last}",)
    if request.scheduler == "lsf":
        throttle = f"%{limit}" if limit else ""
        return (("-J ", "-o ", "-e "),
                (f'-J "{job_name}[{first}-{last}]{throttle}"', f"-o {log_directory}/%J_%I.out",
                 f"-e {log_directory}/%J_%I.err"))
    raise ValueError(f"scheduler={request.scheduler!r} has no job arrays here")


def element_job_id(scheduler: str, array_id: str, index: int) -> str:
    """The id of element ``index`` of the array ``array_id``, as the scheduler prints it.

    >>> [element_job_id(s, i, 4) for s, i in
    ...  [("slurm", "123"), ("sge", "123"), ("pbs", "123[].pbs01"), ("lsf", "123")]]
    ['123_4', '123.4', '123[4].pbs01', '123[4]']
    """
    if scheduler == "slurm":
        return f"{array_id}_{index}"
    if scheduler == "sge":
        return f"{array_id}.{index}"
    if scheduler == "pbs":
        number, _, server = array_id.partition(".")
        return f"{number.removesuffix('[]')}[{index}]" + (f".{server}" if server else "")
    return f"{array_id}[{index}]"


def element_index(scheduler: str, job_id: str) -> tuple[str, int | None]:
    """``(array id, index)`` of an element id; ``(job_id, None)`` for a plain job.

    >>> element_index("slurm", "123_4"), element_index("sge", "123.4")
    (('123', 4), ('123', 4))
    >>> element_index("pbs", "123[4].pbs01"), element_index("lsf", "77")
    (('123[].pbs01', 4), ('77', None))
    """
    if scheduler == "slurm":
        match = re.fullmatch(r"(\d+)_(\d+)", job_id)
    elif scheduler == "sge":
        match = re.fullmatch(r"(\d+)\.(\d+)", job_id)
    else:
        match = re.fullmatch(r"(\d+)\[(\d+)\](.*)", job_id)
    if not match:
        return job_id, None
    array_id = match.group(1) + ("[]" + match.group(3) if scheduler == "pbs" else "")
    return array_id, int(match.group(2))


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
SLURM_ARRAY_TASK_ID, SGE_TASK_ID, PBS_ARRAY_INDEX, LSB_JOBINDEX is set
    """
    if not name or not _TEMPLATE.search(name):
        return name
    index = next((int(env[v]) for v in INDEX_VARIABLES.values()
                  if str(env.get(v, "")).isdigit()), None)
    if index is None:
        raise ValueError(f"worker name {name!r} needs an array index, but none of "
                         f"{', '.join(INDEX_VARIABLES.values())} is set")
    return _TEMPLATE.sub(lambda m: str(index + int(m.group(1) or 0)), name)
