"""The one seam through which hpcgpu runs scheduler commands (sbatch, qsub, bsub, ...).

Tests and the PBS/LSF shims swap :data:`runner`; every caller goes through :func:`run`.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from typing import Callable

from hpcgpu.system import spawn

__all__ = ["CommandError", "CommandResult", "run", "runner", "set_runner"]


@dataclass(frozen=True)
class CommandResult:
    """What a finished command gave back."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandError(RuntimeError):
    """A scheduler command failed; the message carries its own words.

    Examples
    --------
    >>> err = CommandError(CommandResult(("sbatch", "x.sh"), 1, "",
    ...                    "sbatch: error: invalid partition specified: nope"))
    >>> print(err)
    sbatch x.sh failed with exit code 1: sbatch: error: invalid partition specified: nope
    """

    def __init__(self, result: CommandResult, hint: str = "") -> None:
        self.result = result
        said = (result.stderr.strip() or result.stdout.strip() or "(no output)")
        message = f"{shlex.join(result.argv)} failed with exit code {result.returncode}: {said}"
        super().__init__(message + (f"\n{hint}" if hint else ""))


def _subprocess_runner(argv: list[str], timeout: float, input: str | None) -> CommandResult:
    try:
        done = spawn.run(argv, timeout=timeout, input=input)  # it ends with this process
    except FileNotFoundError:
        return CommandResult(
            tuple(argv), 127, "",
            f"{argv[0]}: command not found: run this where the scheduler's client commands "
            f"are installed (a login node), or add {argv[0]} to PATH",
        )
    except subprocess.TimeoutExpired as exc:
        return CommandResult(
            tuple(argv), 124, exc.stdout or "" if isinstance(exc.stdout, str) else "",
            f"{argv[0]} did not answer within {timeout:g} s: is the scheduler's controller up?",
        )
    return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)


#: The function that runs commands: ``runner(argv, timeout, input) -> CommandResult``.
runner: Callable[[list[str], float, str | None], CommandResult] = _subprocess_runner


def set_runner(new: Callable[[list[str], float, str | None], CommandResult] | None) -> None:
    """Swap the command runner (``None`` restores the subprocess one)."""
    global runner
    runner = new or _subprocess_runner


def run(argv: list[str], *, timeout: float = 60, input: str | None = None,
        check: bool = True) -> CommandResult:
    """Run ``argv`` and return its result; raise :class:`CommandError` when it fails.

    Examples
    --------
    >>> run(["echo", "hello"]).stdout
    'hello\\n'
    >>> run(["no-such-sbatch"])
    Traceback (most recent call last):
    ...
    hpcgpu.system.commands.CommandError: no-such-sbatch failed with exit code 127: no-such-sbatch: \
command not found: run this where the scheduler's client commands are installed (a login \
node), or add no-such-sbatch to PATH
    """
    result = runner(list(argv), timeout, input)
    if check and result.returncode != 0:
        raise CommandError(result)
    return result
