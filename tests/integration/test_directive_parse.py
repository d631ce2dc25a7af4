"""Every directive line hpcgpu writes, read by the real scheduler as meant (#38: "every
directive line parses to exactly one option with the intended value").

hpcgpu's checks keep values that could leave their word out of directives; this is the
second half: what it does render, the scheduler itself parses, and reads back as the
value given. Job names, accounts and a user's quoted extra directive (spaces, ``$``) come
from hypothesis; each scheduler gets all of a draw's scripts held (never run), one
listing and one delete for all of them:

- SLURM: ``sbatch --hold`` each, one ``squeue`` (name, account, partition, comment), one
  ``scancel``; the golden scripts go through ``sbatch --test-only`` in test_real_schedulers;
- Grid Engine: ``qsub -h`` each, one ``qstat -j`` (job_name, account, context), one ``qdel``;
  the golden scripts through ``qsub -w v`` (verify only) here;
- OpenPBS: no dry run, so ``qsub -h`` each, one ``qstat -f -F json``, one ``qdel``; the
  golden scripts the same way, where only a resource or queue this test server lacks
  (named in qsub's answer) may be refused; OpenPBS drops the trailing blanks of a ``-v``
  value (the user's, written as given);
- LSF: no LSF here: :func:`bsub_lines`, a model of bsub's reading of ``#BSUB`` lines (one
  option per line, its value one word or one double-quoted string, as in IBM's "Writing
  job scripts" pages), over the golden scripts and the same drawn fields; a user's value
  with ``$`` is one the model refuses (bsub may read it inside quotes: docs/security.md).

A value hpcgpu refuses must be refused naming its field; a value in the portable form
(letters, digits, ``_.-``, a letter first; accounts also ``:@+=,/``) must be accepted. SLURM
and OpenPBS accounts may also hold spaces between words (written shlex-quoted; the other
schedulers refuse them, naming the account).
"""

from __future__ import annotations

import json
import re
import shlex
import string
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from conftest import PBS_BIN
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.examples import EXAMPLES, render_examples
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import JobScript, render
from hpcgpu.jobspec.resources import GPUJobShape

PORTABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
PORTABLE_ACCOUNT = re.compile(r"[\w.:@+=,/-]+", re.ASCII)
JUNK = " \"'$`\\#;é"
names = st.one_of(st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,11}", fullmatch=True),
                  st.text(string.ascii_letters + string.digits + "_.-" + JUNK, min_size=1, max_size=12))
#: an account with spaces between words: SLURM and OpenPBS take it quoted, the others refuse
#: it (tests/unit/test_account_quoting.py)
spaced = st.from_regex(r"[A-Za-z0-9_.:@+=,/-]{1,5}( {1,2}[A-Za-z0-9_.:@+=,/-]{1,5}){1,2}", fullmatch=True)
accounts = st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True),
                     st.text(string.ascii_letters + string.digits + "_.-" + JUNK, min_size=1, max_size=12))
#: the value of the user's own extra directive, which the user double-quotes (spaces, $)
quoted = st.text(string.ascii_letters + string.digits + " $_.-{}", min_size=1, max_size=16).filter(str.strip)
DRAW = st.lists(st.tuples(names, accounts, quoted), min_size=8, max_size=8)
SPACED_DRAW = st.lists(st.tuples(st.from_regex(PORTABLE_NAME, fullmatch=True), spaced, quoted),
                       min_size=4, max_size=4)
SETTINGS = settings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
#: scheduler -> (queue, the extra directive carrying the quoted value, what the user wrote)
EXTRA = {"slurm": ("debug", '--comment="{}"'), "sge": ("all.q", '-ac hpcgpu_parse="{}"'),
         "pbs": ("workq", '-v HPCGPU_PARSE="{}"'), "lsf": ("normal", '-Jd "{}"')}


def rendered(scheduler: str, draw) -> list[tuple[tuple, str]]:
    """(fields, script) of each drawn case hpcgpu accepts; a refusal must name its field,
    and portable values must not be refused."""
    dialect = get_dialect(scheduler)
    queue, extra = EXTRA[scheduler]
    accepted = []
    for name, account, value in draw:
        try:
            shape = GPUJobShape.create(gpus_per_node=1, walltime="00:05:00", job_name=name,
                                       account=account, queue=queue)
            text = render(JobScript(shape, dialect, get_launcher(dialect.default_launcher), "true",
                                    job_extra_directives=(extra.format(value),)))
        except ValueError as error:
            field = "job_name" if f"job_name={name!r}" in str(error) else "account"
            assert f"{field}=" in str(error), error
            bad = name if field == "job_name" else account
            portable = PORTABLE_NAME if field == "job_name" else PORTABLE_ACCOUNT
            assert not portable.fullmatch(bad), f"{field}={bad!r} refused: {error}"
            continue
        accepted.append(((name, account, queue, value), text))
    return accepted


def _run(argv: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **env)


def _submit_held(tmp_path: Path, scripts: list, argv: list[str], pattern: str, delete: list[str],
                 lacks=None) -> list[str]:
    """Submit each script held; the job ids (deleted with ``delete`` here if a submission
    fails). ``lacks(fields, stderr)``: whether a refusal is the site lacking what the script
    names, with the intended value (then the case is dropped from ``scripts``: the scheduler
    read it as written)."""
    ids, kept = [], []
    try:
        for i, (fields, text) in enumerate(scripts):
            path = tmp_path / f"job{i}.sh"
            path.write_text(text)
            done = _run([*argv, str(path)])
            if done.returncode != 0 and lacks is not None and lacks(fields, done.stderr):
                continue
            assert done.returncode == 0, (text, done.stderr)
            ids.append(re.search(pattern, done.stdout).group(1))
            kept.append((fields, text))
    except BaseException:
        if ids:
            _run([*delete, *ids])
        raise
    scripts[:] = kept
    return ids


@pytest.mark.slurm
@SETTINGS
@given(draw=DRAW)
def test_slurm_reads_every_directive_as_written(slurm, tmp_path, draw):
    scripts = rendered("slurm", draw)
    ids = _submit_held(tmp_path, scripts, ["sbatch", "--parsable", "--hold"], r"^(\d+)", ["scancel"])
    if not ids:
        return
    try:
        sep = "\x1f"
        listed = _run(["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o",
                       sep.join(["%i", "%j", "%a", "%P", "%k"])]).stdout
    finally:
        _run(["scancel", *ids])
    seen = {fields[0]: fields[1:] for fields in (line.split(sep) for line in listed.splitlines())}
    for job_id, ((name, account, queue, value), _) in zip(ids, scripts):
        assert seen[job_id] == [name, (account or "").lower() or seen[job_id][1], queue, value]


@pytest.mark.slurm
@SETTINGS
@given(draw=SPACED_DRAW)
def test_slurm_reads_an_account_with_spaces_as_one_value(slurm, tmp_path, draw):
    """SLURM accounts may hold spaces ("Dask On SLURM"): hpcgpu writes them shlex-quoted and
    sbatch reads the quoted word back as the one value (SLURM keeps accounts in lower case)."""
    scripts = rendered("slurm", draw)
    assert len(scripts) == len(draw), "an account with spaces was refused for SLURM"
    assert all("--account='" in text for _, text in scripts)
    ids = _submit_held(tmp_path, scripts, ["sbatch", "--parsable", "--hold"], r"^(\d+)", ["scancel"])
    try:
        listed = _run(["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i\x1f%a"]).stdout
    finally:
        _run(["scancel", *ids])
    seen = dict(line.split("\x1f") for line in listed.splitlines())
    assert [seen[job_id] for job_id in ids] == [fields[1].lower() for fields, _ in scripts]


@pytest.mark.sge
@SETTINGS
@given(draw=DRAW)
def test_grid_engine_reads_every_directive_as_written(sge, tmp_path, draw):
    scripts = rendered("sge", draw)
    # the account is Grid Engine's project (-P), which the site defines: none are here
    def no_project(fields, err):
        return (f'the requested project "{fields[1]}" does not exist' in err
                or fields[1].startswith(".") and "Dot ('.') not allowed as first character" in err)

    ids = _submit_held(tmp_path, scripts, ["qsub", "-h", "-terse"], r"^(\d+)", ["qdel"], no_project)
    if not ids:
        return
    try:
        listed = _run(["qstat", "-j", ",".join(ids)]).stdout
    finally:
        _run(["qdel", *ids])
    seen = {}
    for block in re.split(r"^=+\n", listed, flags=re.M):
        fields = dict(re.findall(r"^(\w+):\s+(.*)$", block, flags=re.M))
        if "job_number" in fields:
            seen[fields["job_number"]] = fields
    for job_id, ((name, account, _queue, value), _) in zip(ids, scripts):
        job = seen[job_id]
        assert account is None  # with a project, refused as not there (above)
        assert (job["job_name"], job["context"]) == (name, f"hpcgpu_parse={value}")


@pytest.mark.pbs
@SETTINGS
@given(draw=DRAW)
@example(draw=[("trailing", None, "a b ")])  # a -v value's trailing blanks: dropped by OpenPBS
def test_openpbs_reads_every_directive_as_written(pbs, tmp_path, draw):
    scripts = rendered("pbs", draw)
    ids = _submit_held(tmp_path, scripts, [f"{PBS_BIN}/qsub", "-h"], r"^(\S+)", [f"{PBS_BIN}/qdel"])
    if not ids:
        return
    try:
        listed = json.loads(_run([f"{PBS_BIN}/qstat", "-f", "-F", "json", *ids]).stdout)["Jobs"]
    finally:
        _run([f"{PBS_BIN}/qdel", *ids])
    for job_id, ((name, account, queue, value), _) in zip(ids, scripts):
        job = listed[job_id]  # qstat's JSON turns a value that looks like a number into one
        text = {key: None if job.get(key) is None else str(job[key]) for key in ("Job_Name", "Account_Name")}
        assert (text["Job_Name"], text["Account_Name"], job["queue"]) == (name, account, queue)
        # OpenPBS drops a -v value's trailing blanks (`qsub -v "X=a "` on its command line too)
        assert str(job["Variable_List"]["HPCGPU_PARSE"]) == value.rstrip(" ")


@pytest.mark.pbs
@SETTINGS
@given(draw=SPACED_DRAW)
def test_openpbs_reads_an_account_with_spaces_as_one_value(pbs, tmp_path, draw):
    scripts = rendered("pbs", draw)
    assert len(scripts) == len(draw), "an account with spaces was refused for OpenPBS"
    ids = _submit_held(tmp_path, scripts, [f"{PBS_BIN}/qsub", "-h"], r"^(\S+)", [f"{PBS_BIN}/qdel"])
    try:
        listed = json.loads(_run([f"{PBS_BIN}/qstat", "-f", "-F", "json", *ids]).stdout)["Jobs"]
    finally:
        _run([f"{PBS_BIN}/qdel", *ids])
    assert [listed[job_id]["Account_Name"] for job_id in ids] == [fields[1] for fields, _ in scripts]


#: bsub's options that take no value (the rest take exactly one)
BSUB_FLAGS = {"-x", "-K", "-I", "-r", "-rn", "-N", "-B", "-H", "-Ip", "-Is"}


def bsub_lines(text: str) -> list[tuple[str, str | None]]:
    """A model of bsub's reading of a script's ``#BSUB`` lines: each is one option, with one
    value (a word, or a double-quoted string without ``"``, taken literally) unless the
    option takes none; anything else raises ``ValueError``.

    >>> bsub_lines('#!/bin/sh\\n#BSUB -P "Dask On LSF"\\n#BSUB -x\\necho')
    [('-P', 'Dask On LSF'), ('-x', None)]
    """
    options = []
    for line in text.splitlines():
        if not line.startswith("#BSUB"):
            if line.startswith("#") or not line.strip():
                continue
            break  # bsub stops at the first command
        rest = line[len("#BSUB"):]
        match = re.fullmatch(r'\s+(-\w+)(?:\s+("[^"\\$`]*"|[^\s"\'\\]+))?\s*', rest)
        if not match or (match.group(2) is None) != (match.group(1) in BSUB_FLAGS):
            raise ValueError(f"not one option with one value: {line!r}")
        value = match.group(2)
        options.append((match.group(1), value[1:-1] if value and value[0] == '"' else value))
    return options


@SETTINGS
@given(draw=DRAW)
@example(draw=[("dollar", None, "a $HOME b")])  # $ in the user's quoted value: not modelled
def test_lsf_model_reads_every_directive_as_written(draw):
    for (name, account, queue, value), text in rendered("lsf", draw):
        if "$" in value:  # bsub may read it inside double quotes (docs/security.md): the model
            user_line = f'#BSUB -Jd "{value}"\n'  # refuses the user's line, the rest must read
            with pytest.raises(ValueError, match="not one option with one value"):
                bsub_lines(user_line)
            text, value = text.replace(user_line, ""), None
        options = dict(bsub_lines(text))
        assert (options["-J"], options.get("-P"), options["-q"], options.get("-Jd")) == (
            name, account, queue, value)


@pytest.mark.parametrize("filename", sorted(f for f in EXAMPLES if f.startswith("lsf")))
def test_lsf_golden_scripts_one_option_per_line(filename):
    text = render_examples()[filename]
    options = bsub_lines(text)
    assert len(options) == text.count("\n#BSUB ") and ("-n", None) not in options


@pytest.mark.sge
def test_grid_engine_verifies_every_golden_script(sge, tmp_path):
    site_lacks = {"sge-1x4-gpus-job.sh": 'unknown resource "gpus"',  # this site's complex: gpu
                  "sge-2x4.sh": 'the requested parallel environment "mpi-4" does not exist'}
    for filename in sorted(f for f in EXAMPLES if f.startswith("sge")):
        path = tmp_path / filename
        path.write_text(render_examples()[filename])
        done = _run(["qsub", "-w", "v", str(path)])
        if filename in site_lacks:
            assert done.returncode != 0 and site_lacks[filename] in done.stderr, (filename, done)
            continue
        assert "verification: found suitable queue" in done.stdout + done.stderr, (filename, done)


@pytest.mark.pbs
def test_openpbs_takes_every_golden_script(pbs, tmp_path):
    """Held, then deleted; refused only for what this one-queue server lacks, by name."""
    site_lacks = {"pbs-2x4.sh": "Unknown queue", "pbs-2x4-gpus-a100.sh": "Unknown resource: gpus"}
    for filename in sorted(f for f in EXAMPLES if f.startswith("pbs")):
        path = tmp_path / filename
        path.write_text(render_examples()[filename])
        done = _run([f"{PBS_BIN}/qsub", "-h", str(path)])
        if filename in site_lacks:
            assert done.returncode != 0 and site_lacks[filename] in done.stderr, (filename, done)
            continue
        assert done.returncode == 0, (filename, done.stderr)
        _run([f"{PBS_BIN}/qdel", done.stdout.strip()])


def test_the_model_refuses_what_bsub_would_split():
    for line in ['#BSUB -P Dask On LSF', '#BSUB -P "x" -Ep "touch /tmp/p"', "#BSUB -J 'a'",
                 '#BSUB -J "$(id)"', "#BSUB -x 1"]:
        with pytest.raises(ValueError):
            bsub_lines(line)
    assert shlex.split('-P "Dask On LSF"') == ["-P", "Dask On LSF"]  # what the model mirrors
