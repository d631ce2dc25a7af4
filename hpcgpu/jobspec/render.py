"""Render whole job scripts from one template inside the package.

:func:`render` is pure: the same :class:`JobScript` gives the same text, which is
what the golden files in ``jobscripts/`` check byte for byte.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from functools import lru_cache

import jinja2

from hpcgpu.jobspec.container import Container
from hpcgpu.jobspec.dialects import Dialect
from hpcgpu.launchers import Launcher
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.scriptfields import check_script, shell_join
from hpcgpu.jobspec.worker_command import WorkerCommand
from hpcgpu.system.pymain import DROP_CWD

__all__ = ["JobScript", "render", "worker_job_script", "python_check", "HAS_HPCGPU"]


@dataclass(frozen=True)
class JobScript:
    """Everything a job script is made of.

    Attributes
    ----------
    shape, dialect, launcher
        What to ask for, in which scheduler's words, started how.
    command : str
        The shell command each task runs (quoted already), or the body run once when
        ``launch`` is False.
    launch : bool
        Prefix ``command`` with the launcher (one task per GPU). Batch mode's
        ``hpcgpu run`` runs once and starts the launcher itself.
    log_directory : str
        Where the scheduler writes the job's stdout and stderr.
    job_extra_directives, job_directives_skip, job_script_prologue, job_script_epilogue
        dask-jobqueue's escape hatches, with its names and meaning: extra directives (the
        prefix is added when missing), substrings of directives to drop, shell lines before
        and after the command.
    environment : tuple of (name, value)
        Variables exported before the command; values are shell-quoted.
    shebang : str
        First line.
    header : tuple of str
        Comment lines after the directives.
    """

    shape: GPUJobShape
    dialect: Dialect
    launcher: Launcher
    command: str
    launch: bool = True
    log_directory: str = "."
    job_extra_directives: tuple[str, ...] = ()
    job_directives_skip: tuple[str, ...] = ()
    job_script_prologue: tuple[str, ...] = ()
    job_script_epilogue: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    shebang: str = "#!/usr/bin/env bash"
    header: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_script(self)  # no value may add a line or leave its word (docs/security.md)

    def directives(self) -> list[str]:
        """The dialect's directives, minus skipped ones, plus the extra ones."""
        lines = [
            line
            for line in self.dialect.directives(self.shape, self.log_directory)
            if not any(skip in line for skip in self.job_directives_skip)
        ]
        prefix = self.dialect.prefix
        for extra in self.job_extra_directives:
            if "\n" in extra:
                raise ValueError(f"job_extra_directives entry {extra!r} holds a newline: one per entry")
            lines.append(extra if extra.startswith(prefix) else f"{prefix} {extra}")
        return lines

    def full_command(self) -> str:
        """The command line, with the launcher in front when ``launch`` is set."""
        if not self.launch:
            return self.command
        prefix = self.launcher.prefix(self.shape)
        if not prefix:
            return self.command
        words = shlex.join(prefix)
        if self.shape.nodes > 1 and self.dialect.host_file:  # expanded in the job
            hosts = f'"${self.dialect.host_file}"'
            words += "".join(f" {w}" if w == hosts else f" {shlex.quote(w)}"
                             for w in self.launcher.across_hosts(hosts, self.dialect.remote_shell))
        return f"{words} {self.command}"


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("hpcgpu.jobspec", "templates"),
        keep_trailing_newline=True,
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    return env.get_template("jobscript.sh.j2")


def render(script: JobScript) -> str:
    """Return the text of the job script.

    Examples
    --------
    >>> from hpcgpu.jobspec.dialects import get_dialect
    >>> from hpcgpu.launchers import get_launcher
    >>> shape = GPUJobShape.create(gpus_per_node=2, walltime=30)
    >>> print(render(JobScript(shape, get_dialect("slurm"), get_launcher("srun"), "hostname")))
    #!/usr/bin/env bash
    #SBATCH --job-name=hpcgpu
    #SBATCH --nodes=1
    #SBATCH --ntasks-per-node=2
    #SBATCH --gpus-per-node=2
    #SBATCH --cpus-per-task=1
    #SBATCH --time=00:30:00
    #SBATCH --output=./%x-%j.out
    #SBATCH --error=./%x-%j.err
    <BLANKLINE>
    srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=2 --kill-on-bad-exit=1 hostname
    <BLANKLINE>
    """
    environment = [(name, shlex.quote(value)) for name, value in script.environment]
    return _template().render(
        shebang=script.shebang,
        directives=script.directives(),
        header=list(script.header),
        prologue=list(script.job_script_prologue),
        environment=environment,
        command=script.full_command(),
        epilogue=list(script.job_script_epilogue),
    )


#: Shell-quoted ``-c`` code: exit 0 where the python has hpcgpu. ``distributed`` too: in a
#: folder holding hpcgpu's source, any python finds ``hpcgpu``; and not from the job's
#: directory, where another user's ``hpcgpu/`` would pass (the worker never imports it).
HAS_HPCGPU = shlex.quote(DROP_CWD + ';import importlib.util as u;'
                         'raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))')


def python_check(python: str, container: Container | None = None,
                 binds: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Shell lines that end a worker job at once, saying what to do, when ``python`` has no
    hpcgpu (or is not there): else the job's only word is ``No module named hpcgpu`` (#43).
    With a ``container``, its runtime must be on the node and the python is the image's.

    Examples
    --------
    >>> print("\\n".join(python_check("/opt/env/bin/python")))  # doctest: +ELLIPSIS
    hpcgpu_python=/opt/env/bin/python
    if ! "$hpcgpu_python" -c 'import sys;...;import importlib.util as u;...' 2>/dev/null; then
      echo "hpcgpu: $hpcgpu_python ... on $HOSTNAME has no hpcgpu: ...
      exit 2
    fi
    >>> print(python_check("python3", Container.create("/i.sif"))[1])  # doctest: +ELLIPSIS
    if ! command -v apptainer >/dev/null; then echo "hpcgpu: apptainer ... job_script_prologue" >&2; exit 2; fi
    """
    first = f"hpcgpu_python={shlex.quote(python)}"
    if container is not None:
        return _container_check(first, container, binds)
    return (
        first,
        f'if ! "$hpcgpu_python" -c {HAS_HPCGPU} 2>/dev/null; then',
        '  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME '
        "has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with "
        'python=... (hpcgpu jobscript --python)" >&2',
        "  exit 2",
        "fi",
    )


def _container_check(first: str, container: Container, binds: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`python_check` in the image: the runtime on PATH, then its python (the runtime's
    own errors, an image it cannot open, stay on stderr)."""
    runtime, image = container.executable, container.image  # no quote, $ or space (Container)
    return (
        first,
        f'if ! command -v {runtime} >/dev/null; then echo "hpcgpu: {runtime} is not on PATH on '
        '$HOSTNAME: load its module in job_script_prologue" >&2; exit 2; fi',
        f'if ! {container.shell_prefix(binds)} "$hpcgpu_python" -c {HAS_HPCGPU}; then',
        f'  echo "hpcgpu: image {image} on $HOSTNAME did not start, or its $hpcgpu_python has no hpcgpu: '
        'install hpcgpu in the image, or name its python with python=..." >&2',
        "  exit 2",
        "fi",
    )


def worker_job_script(
    shape: GPUJobShape,
    dialect: Dialect,
    launcher: Launcher,
    worker: WorkerCommand,
    python: str = "python3",
    start_lines: tuple[str, ...] = (),
    container: Container | None = None,
    binds: tuple[str, ...] = (),
    **options,
) -> JobScript:
    """A job script that starts one Dask worker per GPU through ``hpcgpu.worker``.

    With one launcher task per node (the default) each task is told the GPU count and
    starts a nanny per GPU itself (:meth:`Launcher.worker <hpcgpu.launchers.Launcher.worker>`).
    ``python`` is checked after the user's prologue (which may load a module or activate
    an environment) and before ``start_lines`` (``scheduler_in_job``'s scheduler) and the workers.
    A ``container`` runs the workers (and that check) inside its image, ``binds`` bound
    (:mod:`hpcgpu.jobspec.container`).
    """
    launcher.validate(shape)
    dialect.validate(shape)
    worker = launcher.worker(worker, shape)
    tasks = "one task per node" if launcher.one_task_per == "node" else "one task per GPU"
    header = (
        f"hpcgpu: {shape.nodes} node(s) x {shape.gpus_per_node} GPU(s), "
        f"one Dask worker per GPU, started by {launcher.name} ({tasks})",
    )
    options.setdefault("header", header)
    options["job_script_prologue"] = (tuple(options.get("job_script_prologue", ()))
                                      + python_check(python, container, binds) + tuple(start_lines))
    command = shell_join(worker.argv(python))
    if container is not None:
        command = f"{container.shell_prefix(binds)} {command}"
    return JobScript(shape, dialect, launcher, command, **options)
