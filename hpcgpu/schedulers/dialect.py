"""What every scheduler dialect provides: directives for a shape and the argv of its commands.

A dialect is a frozen value holding a site's options; its methods are pure.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal, get_args, get_origin, get_type_hints

from hpcgpu.jobspec.resources import GPUJobShape, NodeLimits
from hpcgpu.jobspec.scriptfields import check_fields, directive_word

__all__ = ["Dialect", "JOB_STATES", "JobStatus", "TERMINAL_STATES", "host_names", "optional_lines"]

#: The states hpcgpu reports, whatever the scheduler calls them.
JOB_STATES = ("pending", "running", "completing", "completed", "failed", "cancelled", "unknown")
#: States after which a job holds no resources and runs nothing.
TERMINAL_STATES = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class JobStatus:
    """One job as the batch scheduler's status command reports it.

    Attributes
    ----------
    job_id : str
    state : str
        One of :data:`JOB_STATES`.
    nodes : tuple of str
        Hosts the job runs on (empty while pending).
    exit_code : int or None
        Where the status command reports it (PBS, LSF); SLURM and SGE need
        :meth:`Dialect.exit_code_argv`.
    reason : str
        The scheduler's own words for the state (``Resources``, ``NonZeroExitCode``...).

    Examples
    --------
    >>> JobStatus("12", "failed", exit_code=1).finished
    True
    """

    job_id: str
    state: str
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    reason: str = ""

    @property
    def finished(self) -> bool:
        """Whether the job has ended, one way or another."""
        return self.state in TERMINAL_STATES


def optional_lines(shape: GPUJobShape, queue: str, account: str, exclusive: str | None = None,
                   quoted: frozenset[str] = frozenset()) -> list[str]:
    """The directives of the options ``shape`` sets: its queue and account (``{}`` in
    ``queue``/``account`` stands for the value) and exclusive nodes, where a dialect says how.
    A value named in ``quoted`` is written as ``shlex.quote`` writes it (a word with a space
    gets single quotes, which sbatch and OpenPBS's qsub read as bash does; a plain word stays
    as it is)."""
    values = {"queue": shape.queue, "account": shape.account}
    values = {name: shlex.quote(value) if value and name in quoted else value for name, value in values.items()}
    lines = [form.format(value) for form, value in ((queue, values["queue"]), (account, values["account"])) if value]
    return lines + ([exclusive] if exclusive and shape.exclusive else [])


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def host_names(hosts) -> tuple[str, ...]:
    """``hosts`` sorted, each once, each a plain host name (they go into directive lines).

    >>> host_names(["node2", "node1", "node2"])
    ('node1', 'node2')
    >>> host_names(["node1,node2"])
    Traceback (most recent call last):
    ...
    ValueError: host='node1,node2' is not a host name: letters, digits and '._-' only
    """
    for host in hosts:
        if not isinstance(host, str) or not _HOST.fullmatch(host):
            raise ValueError(f"host={host!r} is not a host name: letters, digits and '._-' only")
    return tuple(sorted(set(hosts)))


#: The class constants a dialect may give as keywords of its class line.
_CLASS_KEYWORDS = ("name", "prefix", "submit_executable", "cancel_executable", "default_launcher")


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
    #: Launchers that start workers on every node of a job under this scheduler.
    multi_node_launchers: ClassVar[tuple[str, ...]] = ("srun", "mpirun", "mpiexec", "jsrun")
    #: Options of the submit command before the script (a machine-readable job id).
    submit_options: ClassVar[tuple[str, ...]] = ()
    #: Regular expression whose first group is the job id in the submit command's output.
    job_id_pattern: ClassVar[str] = r"(\d+)"
    #: Options of dask-jobqueue's CPU jobs that its directive lines carry in double quotes, so
    #: that a value may hold spaces (:func:`~hpcgpu.jobspec.scriptfields.quoted_value`).
    quoted_directives: ClassVar[frozenset[str]] = frozenset()
    #: Fields of the GPU job shape that hpcgpu's own directive lines write quoted
    #: (:func:`optional_lines`), so that they may hold spaces; elsewhere a space is refused.
    quoted_fields: ClassVar[frozenset[str]] = frozenset()
    #: Whether :meth:`exclusion_directives` keeps a job off hosts; where not, the cluster
    #: cancels a job that starts on an excluded host (hpcgpu.cluster.batch.exclusions).
    excludes_hosts: ClassVar[bool] = False
    #: The variable that names a job's host file, for a launcher that cannot ask the
    #: scheduler which hosts the job has (Open MPI built without PBS's TM sees only the
    #: first); None where every launcher asks the scheduler itself.
    host_file: ClassVar[str | None] = None
    #: The command that starts such a launcher's daemons on the other hosts as processes of
    #: the job (which the scheduler accounts for and ends with it), ahead of ssh.
    remote_shell: ClassVar[str | None] = None

    limits: NodeLimits = field(default_factory=NodeLimits)

    def __init_subclass__(cls, **constants: str) -> None:
        """Take the constants every dialect names as keywords of its class line, one row of
        a table: ``class MyDialect(Dialect, name="my", prefix="#MY", submit_executable="mysub",
        cancel_executable="mydel", default_launcher="srun")``; set as class attributes, they
        still work."""
        super().__init_subclass__()
        unknown = sorted(set(constants) - set(_CLASS_KEYWORDS))
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown class keyword(s) {', '.join(unknown)}: "
                            f"known are {', '.join(_CLASS_KEYWORDS)}")
        for name, value in constants.items():
            setattr(cls, name, value)

    def __post_init__(self) -> None:
        # Site options are placed inside directives: one word each.
        check_fields(self, directive_word)
        hints = get_type_hints(type(self))
        for name in (f.name for f in fields(self)):  # a Literal option takes one of its values
            choices = get_args(hints[name]) if get_origin(hints[name]) is Literal else ()
            if choices and getattr(self, name) not in choices:
                raise ValueError(f"{name}={getattr(self, name)!r}: use {' or '.join(map(repr, choices))}")

    def directives(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        """Return the directive lines (with their prefix) that ask for ``shape``, after
        checking it against this scheduler's rules."""
        self.validate(shape)
        return [f"{self.prefix} {line}" for line in self._lines(shape, log_directory)]

    def _lines(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        """The directives' text without the prefix."""
        raise NotImplementedError

    def validate(self, shape: GPUJobShape) -> None:
        """Raise ``ValueError`` when this site cannot run ``shape``."""
        shape.check_fits(self.limits)
        if shape.account and " " in shape.account and "account" not in self.quoted_fields:
            raise ValueError(
                f"account={shape.account!r} holds a space, which {self.name}'s directive lines "
                f"do not carry (each {self.prefix} line is split on spaces; hpcgpu quotes accounts "
                "for SLURM and OpenPBS only): use letters, digits and '_.:@+=,/-' only")

    def exclusion_directives(self, hosts) -> tuple[str, ...]:
        """Directive lines (without the prefix) that keep a job off ``hosts``: none where
        the scheduler has no such request (:attr:`excludes_hosts`) or no host is given."""
        host_names(hosts)
        return ()

    def launcher_for(self, shape: GPUJobShape) -> str:
        """The launcher a job of ``shape`` uses when none is named."""
        return self.default_launcher

    def submit_argv(self, script_path: str | None = None) -> list[str]:
        """The command that submits a job script file, or (``None``) the script on its
        standard input: nothing on disk that another user could swap before it is read."""
        return [self.submit_executable, *self.submit_options] + ([script_path] if script_path else [])

    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        """The command that cancels jobs."""
        return [self.cancel_executable, *job_ids]

    def check_argv(self, script_path: str) -> list[str] | None:
        """The command that asks the scheduler to check a script without running it, if any."""
        return None

    def status_argv(self, job_ids: list[str]) -> list[str]:
        """ONE command that reports the state of all ``job_ids`` (finished ones too, where
        the scheduler keeps them)."""
        raise NotImplementedError

    def parse_status(self, output: str) -> dict[str, JobStatus]:
        """Job id -> :class:`JobStatus` from the output of :meth:`status_argv`.

        Jobs the scheduler no longer lists are simply absent.
        """
        raise NotImplementedError

    def exit_code_argv(self, job_id: str) -> list[str] | None:
        """The command that tells a finished job's exit code, when the status does not."""
        return None

    def parse_exit_code(self, output: str) -> int | None:
        """The exit code from the output of :meth:`exit_code_argv` (None when not found)."""
        return None

    def parse_end_nodes(self, output: str) -> tuple[str, ...]:
        """The nodes a finished job ran on, from the output of :meth:`exit_code_argv`: a job
        that failed between two polls was never seen running, and its nodes are known only
        there (empty when not said)."""
        return ()

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        """Path of the file where the job's standard error goes, as the directives ask."""
        raise NotImplementedError

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
