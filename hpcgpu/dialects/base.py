"""What every scheduler dialect provides: directives for a shape and the argv of its commands.

A dialect is a frozen value holding a site's options; its methods are pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from hpcgpu.resources import GPUJobShape, NodeLimits

__all__ = ["Dialect", "JOB_STATES"]

#: The states hpcgpu reports, whatever the scheduler calls them.
JOB_STATES = ("pending", "running", "completing", "completed", "failed", "cancelled", "unknown")


@dataclass(frozen=True)
class Dialect:
    """Base of the four scheduler dialects.

    Subclasses set the class constants and implement :meth:`directives` and
    :meth:`parse_job_id`; site differences are the instance's fields.
    """

    name: ClassVar[str]
    prefix: ClassVar[str]
    submit_executable: ClassVar[str]
    cancel_executable: ClassVar[str]
    default_launcher: ClassVar[str]
    job_id_variable: ClassVar[str]
    #: Regular expression whose first group is the job id in the submit command's output.
    job_id_pattern: ClassVar[str] = r"(\d+)"

    limits: NodeLimits = field(default_factory=NodeLimits)

    def directives(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        """Return the directive lines (with their prefix) that ask for ``shape``."""
        raise NotImplementedError

    def validate(self, shape: GPUJobShape) -> None:
        """Raise ``ValueError`` when this site cannot run ``shape``."""
        shape.check_fits(self.limits)

    def submit_argv(self, script_path: str) -> list[str]:
        """The command that submits a job script file."""
        return [self.submit_executable, script_path]

    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        """The command that cancels jobs."""
        return [self.cancel_executable, *job_ids]

    def check_argv(self, script_path: str) -> list[str] | None:
        """The command that asks the scheduler to check a script without running it, if any."""
        return None

    def parse_job_id(self, output: str) -> str:
        """Return the job id from the submit command's standard output.

        Raises ``ValueError`` with the output when no id is there.
        """
        match = re.search(self.job_id_pattern, output)
        if not match:
            raise ValueError(
                f"could not find a job id in the output of {self.submit_executable}: {output!r}"
            )
        return match.group(1)
