"""Values that reach a job script: refused before rendering when they could change its parse.

A job script is read twice: by the scheduler (its directive lines) and by the shell (the
rest). A value must not be able to add a line, leave its directive, or become more than the
one word it is meant to be. Values inside shell commands are quoted where they are rendered
(``shlex``); the checks here cover what quoting cannot: single-line fields (a newline ends a
directive, the shebang or a comment), words placed in directives (schedulers split them on
spaces and read quotes their own way) and names of exported variables.

dask-jobqueue's raw-shell fields (``job_script_prologue``, ``job_script_epilogue``,
``job_extra_directives``, ``worker_extra_args``, ``python``) are not checked here: they are
shell (or directive) text by definition (docs/security.md).

Examples
--------
>>> directive_word("log_directory", "/scratch/me/logs")
'/scratch/me/logs'
>>> directive_word("log_directory", "/tmp/x\\ntouch /tmp/pwned #")
Traceback (most recent call last):
...
ValueError: log_directory='/tmp/x\\ntouch /tmp/pwned #' holds a newline (\\n): a job script \
takes it on one line. Remove it
>>> directive_word("queue", "gpu long")
Traceback (most recent call last):
...
ValueError: queue='gpu long' holds ' ', which cannot go into a scheduler directive: use \
letters, digits and '_.,:@+=/~-' only
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Any

__all__ = ["CPU_WORDS", "DIRECTIVE_CHARACTERS", "check_fields", "check_options", "check_script",
           "directive_word", "env_name", "quoted_value", "shebang", "shell_join", "shell_path", "TEMPLATE_OPTIONS",
           "shell_template", "shell_word", "single_line"]

#: What a value placed in a directive may hold besides letters and digits (any script).
DIRECTIVE_CHARACTERS = "_.,:@+=/~-"
_DIRECTIVE = re.compile(r"[\w.,:@+=/~-]+")
# Control characters (a newline or carriage return ends a line for shells and schedulers;
# bash drops NUL) and the line breaks of Unicode.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VARIABLE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")
_NAMES = {"\n": "a newline (\\n)", "\r": "a carriage return (\\r)", "\x00": "a NUL byte"}
#: What a double-quoted directive value may not hold: the characters a scheduler or bash
#: reads inside double quotes (LSF's ``#BSUB -E``/``-Ep`` run commands).
_QUOTE_BREAKERS = "\"'\\$`"
#: A word whose only ``$`` are variable references, and nothing else that bash reads inside
#: double quotes: it may be written in double quotes, for the job's shell to expand them.
_TEMPLATE = re.compile(r'(?:[^"\'\\`$\x00-\x1f\x7f]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})*')


def single_line(field: str, value: Any) -> str:
    """``value`` as text, refused when it holds a line break or another control character."""
    text = str(value)
    found = _CONTROL.search(text)
    if found:
        char = found.group()
        what = _NAMES.get(char, f"the control character {char!r}")
        raise ValueError(f"{field}={value!r} holds {what}: a job script takes it on one line. "
                         "Remove it")
    return text


def directive_word(field: str, value: Any) -> str:
    """``value`` as one word of a directive line (``#SBATCH``, ``#PBS``, ``#BSUB``, ``#$``):
    no spaces, quotes or shell characters, which schedulers split or read their own way."""
    return _word(field, value, "a scheduler directive")


def shell_word(field: str, value: Any, where: str = "dask-jobqueue's unquoted worker command",
               shown: Any = None) -> str:
    """``value`` as one word that dask-jobqueue writes into its CPU workers' command line
    unquoted (``--interface``, ``--local-directory``, ``--name``, TLS file paths)."""
    text = _word(field, value, where, shown)
    if text.startswith("~"):  # the shell would expand it
        raise ValueError(f"{field}={value if shown is None else shown!r} starts with '~', "
                         "which the job's shell would expand: give the full path")
    return text


def shell_path(field: str, value: Any) -> str:
    """:func:`shell_word`, where ``$NAME``, ``${NAME}`` and a leading ``~/`` may stand for
    part of the path (dask-jobqueue's ``local_directory="$TMPDIR"``: the job's shell expands
    them)."""
    single_line(field, value)
    plain = re.sub(r"^~(?=/|$)", "v", _VARIABLE.sub("v", str(value)))
    shell_word(field, plain, "dask-jobqueue's unquoted worker command (besides $NAME, ${NAME} "
               "and ~/)", value)
    return str(value)


def shell_template(field: str, value: Any) -> str:
    """:func:`shell_word`, where ``$NAME`` and ``${NAME}`` may stand for part of the word
    (dask-jobqueue's ``name="test-$MY_ENV_VARIABLE"``: the job's shell expands it; hpcgpu
    writes such words in double quotes, :func:`shell_join`).

    >>> shell_template("name", "test-$MY_ENV_VARIABLE")
    'test-$MY_ENV_VARIABLE'
    >>> shell_template("name", "test-$(touch /tmp/p)")
    Traceback (most recent call last):
    ...
    ValueError: name='test-$(touch /tmp/p)' holds '$', which cannot go into dask-jobqueue's \
unquoted worker command (besides $NAME and ${NAME}): use letters, digits and '_.,:@+=/~-' only
    """
    single_line(field, value)
    shell_word(field, _VARIABLE.sub("v", str(value)),
               "dask-jobqueue's unquoted worker command (besides $NAME and ${NAME})", value)
    return str(value)


def quoted_value(field: str, value: Any) -> str:
    """``value`` for a directive that carries it in double quotes (dask-jobqueue's
    ``#BSUB -P "Dask On LSF"``): spaces may stand, but no quote, backslash, ``$`` or
    backtick, which would end the quotes or be read inside them.

    >>> quoted_value("project", "Dask On LSF")
    'Dask On LSF'
    >>> quoted_value("project", 'x" -Ep "touch /tmp/p')
    Traceback (most recent call last):
    ...
    ValueError: project='x" -Ep "touch /tmp/p' holds '"', which cannot go inside a quoted \
scheduler directive: leave out quotes, backslashes, '$' and backticks
    """
    text = single_line(field, value)
    bad = next((c for c in text if c in _QUOTE_BREAKERS), None)
    if bad is not None:
        raise ValueError(f"{field}={value!r} holds {bad!r}, which cannot go inside a quoted scheduler "
                         "directive: leave out quotes, backslashes, '$' and backticks")
    return text


#: Worker options whose value dask-jobqueue's users write with ``$NAME`` for the job's shell
#: to expand (a worker name after ``$SLURM_ARRAY_TASK_ID``, ``local_directory="$TMPDIR"``).
TEMPLATE_OPTIONS = frozenset({"--name", "--local-directory"})


def shell_join(argv) -> str:
    """A command line for the job's shell: each argument shell-quoted, except the value of a
    :data:`TEMPLATE_OPTIONS` option whose only ``$`` are ``$NAME``/``${NAME}`` references
    (and that holds nothing else bash reads inside double quotes): it goes in double
    quotes, so that the job's shell expands them.

    >>> print(shell_join(["python", "--name", "test-$MY_ENV_VARIABLE", "--x", "$HOME", "--name", "$(id)"]))
    python --name "test-$MY_ENV_VARIABLE" --x '$HOME' --name '$(id)'
    """
    argv = [str(a) for a in argv]
    return " ".join(f'"{a}"' if i and argv[i - 1] in TEMPLATE_OPTIONS and "$" in a and _TEMPLATE.fullmatch(a)
                    else shlex.quote(a) for i, a in enumerate(argv))


def _word(field: str, value: Any, where: str, shown: Any = None) -> str:
    text = single_line(field, value)
    if not _DIRECTIVE.fullmatch(text):
        bad = next((c for c in text if not _DIRECTIVE.fullmatch(c)), "")
        bad_shown = f"{bad!r}" if bad else "nothing"
        hint = (" (a symbolic link to the directory with such a name works)"
                if field.endswith("directory") else "")
        value = value if shown is None else shown
        raise ValueError(f"{field}={value!r} holds {bad_shown}, which cannot go into {where}: use "
                         f"letters, digits and {DIRECTIVE_CHARACTERS!r} only{hint}")
    return text


def env_name(field: str, name: Any) -> str:
    """The name of an exported variable: a shell identifier."""
    text = str(name)
    if not _ENV_NAME.fullmatch(text):
        raise ValueError(f"{field} name {name!r} is not a shell variable name: use letters, "
                         "digits and '_', not starting with a digit")
    return text


def shebang(value: Any) -> str:
    """The first line of the script: ``#!`` and an interpreter, on one line."""
    text = single_line("shebang", value)
    if not text.startswith("#!"):
        raise ValueError(f"shebang={value!r} must start with '#!', e.g. '#!/usr/bin/env bash'")
    return text


#: Options of a cluster (Python names) -> the check their value gets before anything starts.
_CHECKS = {
    "log_directory": directive_word, "shared_temp_directory": single_line,
    "local_directory": single_line, "interface": single_line, "job_name": directive_word,
    "queue": directive_word, "account": quoted_value, "project": directive_word,
    "gpu_type": directive_word, "walltime": directive_word, "resource_spec": directive_word,
    "death_timeout": single_line,
}

#: What dask-jobqueue's CPU jobs write unquoted into the worker's command line, and its
#: unquoted ``#SBATCH -A`` (hpcgpu's own GPU scripts quote the account where the scheduler
#: reads quotes: a dialect's ``quoted_fields``; the others refuse a space in ``validate``).
CPU_WORDS = {"local_directory": shell_path, "interface": shell_word,
             "shared_temp_directory": shell_word, "death_timeout": shell_word,
             "account": directive_word}


def check_options(options: dict[str, Any], checks: dict[str, Any] | None = None) -> None:
    """Check every option of a cluster that reaches a script (from arguments, config files
    and ``DASK_HPCGPU__*`` alike): raise ``ValueError`` naming the first bad one.
    ``checks`` replaces the check of some options (:data:`CPU_WORDS`).

    >>> check_options({"queue": "gpu", "shebang": "#!/bin/bash", "log_directory": None})
    >>> check_options({"shebang": "#!/bin/bash\\ntouch /tmp/pwned"})
    Traceback (most recent call last):
    ...
    ValueError: shebang='#!/bin/bash\\ntouch /tmp/pwned' holds a newline (\\n): a job script \
takes it on one line. Remove it
    """
    checks = {**_CHECKS, **(checks or {})}
    for name, value in options.items():
        if value is None:
            continue
        if name == "shebang":
            shebang(value)
        elif name in checks:
            checks[name](name, value)
        elif name == "site" and isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str):
                    directive_word(f"site[{key!r}]", item)
        elif name == "ucx_environment" and isinstance(value, dict):
            for key, item in value.items():
                single_line("ucx_environment name", key)
                single_line(f"ucx_environment[{key!r}]", item)


def check_fields(owner: Any, check: Any) -> None:
    """Apply ``check(field, value)`` to every text field of the dataclass ``owner``."""
    for name in (f.name for f in dataclasses.fields(owner)):
        value = getattr(owner, name)
        if isinstance(value, str):
            check(name, value)


def check_script(script: Any) -> None:
    """Check a :class:`hpcgpu.jobspec.render.JobScript` before it is rendered: its shape's names and
    the log directory go into directives, the shebang and header on lines of their own,
    the environment's names unquoted. The command is quoted where it is built; prologue,
    epilogue and extra directives are raw shell by definition."""
    shebang(script.shebang)
    directive_word("log_directory", script.log_directory)
    quoted = getattr(script.dialect, "quoted_fields", frozenset())  # written shlex-quoted
    for name in ("queue", "account", "gpu_type", "job_name"):
        value = getattr(script.shape, name, None)
        if value is not None:
            (quoted_value if name in quoted else directive_word)(name, value)
    for line in script.header:
        single_line("header", line)
    for name, value in script.environment:
        env_name("environment", name)
        if "\x00" in str(value):
            raise ValueError(f"environment value of {name} holds a NUL byte: remove it")
