"""No scheduler or launcher is looked up by its name outside its own home.

A string constant equal to a registered scheduler's name (``"slurm"``) or a launcher's
(``"srun"``) anywhere in hpcgpu but ``hpcgpu/schedulers/`` and ``hpcgpu/launchers/`` is a table
or a branch keyed by that name: what the scheduler or launcher should own. Docstrings and log
messages are exempt, and a short reviewed allowlist below.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hpcgpu.launchers import LAUNCHERS
from hpcgpu.schedulers.registry import BUILTIN

PACKAGE = Path(__file__).resolve().parents[2] / "hpcgpu"
HOMES = ("schedulers", "launchers")
NAMES = frozenset(BUILTIN) | frozenset(LAUNCHERS)
_LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})

_ALL = tuple(sorted(BUILTIN))
#: module path under hpcgpu/ -> (the names it may hold, why: reviewed).
ALLOWED: dict[str, tuple[tuple[str, ...], str]] = {
    "cluster/batch/schedulers.py": (_ALL, "the one class line per scheduler names it"),
    "jobspec/examples.py": (_ALL + tuple(LAUNCHERS), "the golden cases name what they render"),
    "cli/doctor.py": (("slurm",), "a default of the command line"),
    "doctor/job.py": (("slurm",), "a default argument"),
    "cluster/batch/job.py": (("slurm",), "dask-jobqueue's fallback config_name of GPUJob"),
    "doctor/checks.py": (("mpirun",), "the mpirun executable of the MPI install, not the launcher"),
    "network/probes.py": (("mpirun",), "the mpirun executable of the MPI install, not the launcher"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _log_arguments(tree: ast.AST) -> set[int]:
    """ids of every node inside the arguments of ``logger.<level>(...)`` calls."""
    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _LOG_METHODS):
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                found.update(id(child) for child in ast.walk(argument))
    return found


def names_in(source: str, names: frozenset[str] = NAMES) -> list[tuple[int, str]]:
    """(line, name) of every string constant in ``source`` equal to one of ``names``,
    docstrings and log messages aside."""
    tree = ast.parse(source)
    exempt = _docstrings(tree) | _log_arguments(tree)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value in names and id(node) not in exempt)


def test_scheduler_and_launcher_names_stay_home():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(tuple(f"{home}/" for home in HOMES)):
            continue
        for line, name in names_in(path.read_text()):
            if name not in ALLOWED.get(relative, ((), ""))[0]:
                found.append(f"hpcgpu/{relative}:{line}: {name!r}")
    assert not found, ("a scheduler or launcher looked up by its name: move the table or branch "
                       "into hpcgpu/schedulers/ or hpcgpu/launchers/\n" + "\n".join(found))


def test_every_allowance_is_still_needed():
    stale = [module for module in ALLOWED if not names_in((PACKAGE / module).read_text())]
    assert not stale, f"allowances no longer needed: {stale}"


def test_the_lint_sees_a_table_and_spares_docstrings_and_logs():
    source = ('"""slurm"""\nimport logging\nlogger = logging.getLogger()\n'
              'def f(x):\n    """srun"""\n    logger.info("slurm")\n'
              '    return {"slurm": 1, "pbs": 2}[x] if x != "srun" else 0\n')
    assert names_in(source) == [(7, "pbs"), (7, "slurm"), (7, "srun")]
