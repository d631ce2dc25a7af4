"""Property: no value of a non-raw field can change how bash or the scheduler reads a job script.

Every field that reaches a script (besides dask-jobqueue's raw-shell ones) gets random text:
newlines, quotes, ``$()``, backticks, ``;``, ``#``, globs, NUL, Unicode. Rendering must either
refuse it with a ``ValueError`` naming the field, or give a script that

* has the same directive and comment lines, each split into the same words by the
  scheduler (``shlex``, as sbatch/qsub/bsub read them), with the value where a benign
  value was;
* runs the same simple commands in bash, in which the value is exactly one word (or part of
  the same word) with no expansion, redirection or operator it could bring.

bash itself parses the script: a DEBUG trap with ``extdebug`` prints each simple command
before bash expands it and skips it (``set -T`` carries that into subshells), so nothing in
the script runs. One bash per example, about 5 ms. The same property holds for the scripts
dask-jobqueue renders for CPU workers, which quote nothing.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import render, worker_job_script
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.worker_command import WorkerCommand

BENIGN = "hpcgpuB0"
_TRACE = """shopt -s extdebug
set -T
trap 'printf "%s\\0" "$BASH_COMMAND"; false' DEBUG
"""
SHAPE = ("queue", "account", "job_name", "gpu_type")
SCRIPT = ("log_directory", "shebang", "environment_name", "environment_value")
WORKER = ("scheduler", "scheduler_file", "name", "interface", "local_directory", "memory_limit",
          "protocol", "tls_ca_file", "tls_cert", "tls_key", "retire_before", "lifetime_stagger")
SITE = {"slurm": (), "pbs": ("gpu_resource", "gpu_type_resource"), "lsf": ("gpu_mode",),
        "sge": ("parallel_environment", "gpu_complex", "multi_node_parallel_environment")}
CASES = [(scheduler, field) for scheduler in SITE
         for field in SHAPE + SCRIPT + WORKER + SITE[scheduler]
         if (scheduler, field) != ("sge", "gpu_type")]  # SGE has no GPU type request
ATTACKS = ["/tmp/x\ntouch /tmp/pwned #", "a b", "a'b", 'a"b', "$(id)", "`id`", "a;id", "a#b",
           "a|id", "*", "{a,b}", "~", "a\\", "a\x00b", "a\rb", "\u2028", "é", "x\n#SBATCH --uid=0",
           "$HOME", "a&", "-x", "$'\\n'"]
#: worker fields whose $NAME / ${NAME} references the job's shell expands (and nothing else)
TEMPLATE_FIELDS = ("name", "local_directory")
_NAME_REFERENCES = re.compile(r'(?:[^"\'\\`$\x00-\x1f\x7f]|\$[A-Za-z_]\w*|\$\{[A-Za-z_]\w*\})*', re.ASCII)
_ALPHABET = list("ab/._-:=,@+~% \t\n\r\"'`$();|&<>#*?[]{}\\!\x00é😀")
# Not empty: an empty value means "not given", which is no injection.
VALUES = st.one_of(st.sampled_from(ATTACKS), st.text(st.sampled_from(_ALPHABET), min_size=1,
                                                     max_size=12), st.text(min_size=1, max_size=8))


@functools.cache
def render_with(scheduler: str, field: str, value: str) -> str:
    """The job script with ``value`` in ``field`` and defaults everywhere else."""
    shape = GPUJobShape.create(gpus_per_node=2, queue="q", account="acc", gpu_type="h100")
    site, launcher, nodes = {}, None, 1
    if field == "multi_node_parallel_environment":
        launcher, nodes = "mpirun", 2
    if field in SITE[scheduler]:
        site[field] = value
    dialect = get_dialect(scheduler, **site)
    shape = dataclasses.replace(shape, nodes=nodes,
                                **({field: value} if field in SHAPE else {}))
    worker = {"scheduler": "tls://10.0.0.1:8786"}
    if field in WORKER:
        address = field in ("scheduler", "scheduler_file")
        worker = {field: value} if address else {**worker, field: value}
    options = {"environment": (("HPCGPU_ENV", "x"),)}
    if field == "log_directory":
        options["log_directory"] = value
    if field == "shebang":
        options["shebang"] = "#!" + value
    if field == "environment_name":
        options["environment"] = ((value, "x"),)
    if field == "environment_value":
        options["environment"] = (("HPCGPU_ENV", value),)
    launcher = get_launcher(launcher or dialect.default_launcher)
    return render(worker_job_script(shape, dialect, launcher, WorkerCommand(**worker), **options))


@functools.cache
def bash_commands(text: str) -> tuple[str, ...]:
    """The simple commands bash would run, unexpanded, in order; none is run."""
    done = subprocess.run(["bash", "--norc", "--noprofile", "-s"], input=(_TRACE + text).encode(),
                          capture_output=True, timeout=10, check=False)
    return tuple(c.decode("utf-8", "replace") for c in done.stdout.split(b"\0")[:-1])


def words(command: str) -> list[tuple[str, bool]]:
    """bash's words of one simple command: (text after quote removal, whether anything in
    it is expanded or is an operator)."""
    result, word, special, quote, i, started = [], [], False, None, 0, False
    while i < len(command):
        c = command[i]
        if c == "\x01" and quote and i + 1 < len(command):
            # bash keeps a quoted \x01 or \x7f as CTLESC + it; $BASH_COMMAND shows that form
            i += 1
            word.append(command[i])
        elif quote == "'":
            quote, word = (None, word) if c == "'" else (quote, word + [c])
        elif quote == '"':
            if c == "\\" and i + 1 < len(command) and command[i + 1] in '$`"\\\n':
                i += 1
                word.append(command[i])
            elif c == '"':
                quote = None
            else:
                special |= c in "$`"
                word.append(c)
        elif c in " \t":
            if started:
                result.append(("".join(word), special))
            word, special, started = [], False, False
        else:
            started = True
            if c in "'\"":
                quote = c
            elif c == "\\" and i + 1 < len(command):
                i += 1
                word.append(command[i])
            else:
                special |= c in "$`;&|<>()*?[]{}\n\\" or (c == "~" and not word)
                word.append(c)
        i += 1
    if started or quote:
        result.append(("".join(word), special or quote is not None))
    return result


def header(text: str) -> list[str]:
    """The lines the scheduler reads for directives: up to the first line that is not a
    comment."""
    lines = []
    for line in text.split("\n"):
        if line.strip() and not line.startswith("#"):
            break
        lines.append(line)
    return lines


#: the marker of fields checked for their form: death_timeout is a duration (#38)
MARKERS = {"death_timeout": "4321s"}


def assert_parse_unchanged(scheduler: str, field: str, value: str, render=None) -> None:
    render = render or render_with
    marker = MARKERS.get(field, BENIGN)
    benign, text = render(scheduler, field, marker), render(scheduler, field, value)
    assert marker in benign, f"{field} does not reach the {scheduler} script"
    wanted = "#!" + value if field == "shebang" else value
    # The scheduler's view: same lines, each the same words, the value inside one of them.
    before, after = header(benign), header(text)
    assert len(after) == len(before), f"{field}={value!r} changed the directive lines:\n{text}"
    for old, new in zip(before, after):
        if field == "shebang" and old.startswith("#!"):
            assert new == wanted
            continue
        expected = [w.replace(marker, value) for w in shlex.split(old)]
        try:
            got = shlex.split(new)
        except ValueError:
            got = None
        assert got == expected, f"{field}={value!r} changed the directive {new!r}"
    # bash's view: the same commands; the value's word carries it verbatim, unexpanded (but
    # for a worker name or local directory made of $NAME references: the job's shell expands
    # those, as dask-jobqueue's users expect; still one word, nothing else run).
    expands = field in TEMPLATE_FIELDS and "$" in value and bool(_NAME_REFERENCES.fullmatch(value))
    before, after = bash_commands(benign), bash_commands(text)
    assert len(after) == len(before), f"{field}={value!r} changed the commands:\n{after}"
    for old, new in zip(before, after):
        old_words, new_words = words(old), words(new)
        assert len(new_words) == len(old_words), f"{field}={value!r} changed {old!r} to {new!r}"
        for (old_word, old_special), (new_word, new_special) in zip(old_words, new_words):
            assert new_word == old_word.replace(marker, value), f"{field}={value!r}: {new!r}"
            assert new_special == old_special or expands and value in new_word, \
                f"{field}={value!r} brings an expansion: {new!r}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), value=VALUES)
def test_no_field_changes_the_scripts_parse(case, value):
    scheduler, field = case
    try:
        render_with(scheduler, field, value)
    except ValueError as error:
        name = "environment" if field.startswith("environment") else field
        assert name in str(error) or field == "shebang" and "shebang" in str(error), error
        return
    assert_parse_unchanged(scheduler, field, value)


@pytest.mark.parametrize("scheduler, field", CASES)
def test_benign_values_reach_the_script_and_keep_its_parse(scheduler, field):
    assert_parse_unchanged(scheduler, field, "other_value_1")


@pytest.mark.parametrize("command, expected", [
    ("export X='a b'", [("export", False), ("X=a b", False)]),
    ('echo "$(id)" `id` a\\ b', [("echo", False), ("$(id)", True), ("`id`", True), ("a b", False)]),
    ("srun x > f", [("srun", False), ("x", False), (">", True), ("f", False)]),
    ("export X='\x01\x01\x01\x7f'", [("export", False), ("X=\x01\x7f", False)]),
])
def test_words_sees_what_bash_sees(command, expected):
    assert words(command) == expected


def test_the_checker_catches_an_injection():
    # What the checker would say about the scripts of issue 26 (a line added by a value).
    text = "#!/usr/bin/env bash\n#SBATCH --output=/tmp/x\ntouch /tmp/pwned #/%x.out\nsrun w\n"
    assert bash_commands(text) == ("touch /tmp/pwned", "srun w")
    assert header(text) == ["#!/usr/bin/env bash", "#SBATCH --output=/tmp/x"]


# ------------------------------------------------------------------ dask-jobqueue's CPU jobs
# The same property for the scripts dask-jobqueue renders (CPU workers), which quote nothing.
# local_directory is left out: there "$TMPDIR" is meant to be expanded (tested by example).
CPU_FIELDS = ("log_directory", "job_name", "queue", "account", "walltime", "shebang",
              "interface", "death_timeout")
CPU_CASES = [(scheduler, field) for scheduler in SITE for field in CPU_FIELDS]
_LOGS = tempfile.mkdtemp(prefix="hpcgpu-cpu-property-")  # dask-jobqueue makes log directories
atexit.register(shutil.rmtree, _LOGS, True)


@functools.cache
def render_cpu(scheduler: str, field: str, value: str) -> str:
    """dask-jobqueue's CPU job script with ``value`` in ``field``, through hpcgpu's checks."""
    from hpcgpu.cluster.batch.cpu_job import cpu_job_class
    from hpcgpu.cluster.batch.cpu_setup import prepare_cpu

    options = {"cores": 2, "memory": "2GB", "log_directory": _LOGS}
    key = "project" if field == "account" and scheduler in ("lsf", "sge") else field
    options[key] = {"shebang": "#!" + value, "log_directory": f"{_LOGS}/{value}"}.get(field, value)
    setup = prepare_cpu(scheduler, options)
    return cpu_job_class(scheduler)("tcp://10.0.0.1:8786", name="w", config_name=scheduler,
                                    interface=setup.network_options["interface"],
                                    **setup.job_options).job_script()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CPU_CASES), value=VALUES)
def test_no_field_changes_the_parse_of_dask_jobqueues_scripts(case, value):
    scheduler, field = case
    if field == "log_directory":  # inside the temporary directory, in the form a path keeps
        assume(".." not in value and os.path.normpath(f"{_LOGS}/{value}") == f"{_LOGS}/{value}")
    try:
        render_cpu(scheduler, field, value)
    except ValueError as error:
        assert field in str(error) or field == "account" and "project" in str(error), error
        return
    assert_parse_unchanged(scheduler, field, value, render_cpu)


@pytest.mark.parametrize("scheduler, field", CPU_CASES)
def test_benign_values_reach_dask_jobqueues_scripts(scheduler, field):
    value = "90s" if field in MARKERS else "other_value_1"
    assert_parse_unchanged(scheduler, field, value, render_cpu)
