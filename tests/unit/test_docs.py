"""Every code block of README.md and docs/*.md works as written (docs/testing.md).

Python blocks run as scripts, as written (``python block.py`` in an empty directory: CPU
workers where the block says GPU; the real local SLURM and Grid Engine where it names
them; forked from an interpreter that imported distributed once, tests/blockserver.py, whose
blocks see what ``python block.py`` gives them: test_a_block_sees_what_python_block_py_gives),
and end without a traceback; shell blocks run with bash; YAML parses.
Blocks marked ``<!-- not-run: reason -->`` (a GPU, a real site, an install) are checked
without running: Python compiled and its hpcgpu imports resolved, shell through
``bash -n``, each hpcgpu command parsed by click, and the repository files it names exist.
New pages are picked up by the glob in :func:`docblocks.pages`. At the end of the run the
terminal lists every block: ran, parsed, or only checked and why (tests/conftest.py).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from blockserver import BlockServer
from docblocks import (LANGUAGES, ROOT, Block, blocks_of, commands, how_checked, indented_code, pages,
                       stray_markers)

BLOCKS = [block for page in pages() for block in blocks_of(page)]
TIMEOUT = 300  # one block; the cluster walkthroughs start real jobs on a busy 2-core machine


def _blocks(language: str) -> list:
    """A block that a runnable block below continues is run as the head of that one's script."""
    return [pytest.param(b, id=b.id, marks=_group(b)) for b in BLOCKS
            if LANGUAGES.get(b.language) == language and not b.continued]


def _group(block: Block) -> list:
    """A block that starts a UCX cluster runs in the ``ucx`` group (tests/conftest.py): beside
    another UCX cluster on this host its workers do not connect, and it ran into its time limit."""
    starts_ucx = not block.not_run and re.search(r"protocol=[\"']ucx", block.text)
    return [pytest.mark.xdist_group("ucx")] if starts_ucx else []


def test_the_pages_have_blocks():
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/cluster.md", "docs/collections.md"}


def test_every_block_says_its_language_and_markers_are_known():
    bad = [f"{b.id}: language {b.language!r}" for b in BLOCKS if b.language not in LANGUAGES]
    bad += [f"{b.id}: unknown marker {m}" for b in BLOCKS for m in b.unknown_markers]
    bad += [f"{b.id}: not-run needs a reason" for b in BLOCKS if b.not_run == ""]
    assert not bad, ("give every fenced block one of the languages " + ", ".join(sorted(LANGUAGES))
                     + " and only the markers of docs/testing.md:\n" + "\n".join(bad))


def test_every_block_is_run_or_says_why():
    """No block is silently ignored: each one runs, parses, is output (text), or is checked
    only for a reason its marker gives."""
    unknown = [b.id for b in BLOCKS if how_checked(b).startswith("unknown")]
    assert not unknown
    assert sum(how_checked(b).startswith("ran") for b in BLOCKS) >= 20


def test_no_indented_code_blocks():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in pages() for n in indented_code(p)]
    assert not found, f"use fenced blocks with a language instead of indented code: {found}"


def test_every_marker_is_right_above_its_block():
    """A marker below its block (or anywhere else) applies to no block: the block it was meant
    for runs, e.g. an ``sbatch`` of an image that does not exist."""
    found = [f"{p.relative_to(ROOT)}:{n}" for p in pages() for n in stray_markers(p)]
    assert not found, f"put each marker on the line(s) right above its block's fence: {found}"


# ------------------------------------------------------------------ python
def _needs_schedulers(request, text: str) -> None:
    if any(word in text for word in ("SLURMCluster", "sbatch", "jobscript slurm", "--job")):
        request.getfixturevalue("slurm")
    if any(word in text for word in ("SGECluster", "qsub")):
        request.getfixturevalue("sge")


def _environment(tmp_path: Path) -> dict:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return dict(os.environ, PYTHONPATH=path, XDG_CACHE_HOME=str(tmp_path / "cache"),
                PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))


def _check_python_without_running(block: Block) -> None:
    tree = ast.parse(block.text, filename=block.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpcgpu"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"), f"{block.id}: {node.module}.{alias.name} does not exist"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hpcgpu"):
                    importlib.import_module(alias.name)


@pytest.fixture(scope="module")
def block_server(tmp_path_factory):
    """One per test process: the blocks' scripts are forked from it (tests/blockserver.py)."""
    outputs = tmp_path_factory.mktemp("block-output")
    server = BlockServer(_environment(outputs), outputs)
    yield server
    server.close()


@pytest.mark.parametrize("block", _blocks("python"))
def test_python_block(block: Block, request, tmp_path, block_server):
    if block.not_run:
        _check_python_without_running(block)
        return
    text = block.runnable_text()
    _needs_schedulers(request, text)
    done = _run_as_script(text, tmp_path, block_server)
    what = block.id + "".join(f" after {b.id}" for b in _above(block))
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    # a block that ends with its cluster open: closed at exit, cleanly (no traceback)
    assert "Traceback" not in done.stderr, f"{what} ended with a traceback:\n{done.stderr[-4000:]}"


def _above(block: Block) -> list[Block]:
    """The blocks that run before ``block`` in its script, nearest first."""
    return [block.continues] + _above(block.continues) if block.continues else []


def _run_as_script(text: str, tmp_path: Path, server: BlockServer) -> subprocess.CompletedProcess:
    """The block saved as ``block.py`` and run as ``python block.py``, as a reader would."""
    (tmp_path / "block.py").write_text(text)
    return server.run(tmp_path / "block.py", _environment(tmp_path), TIMEOUT)


# ------------------------------------------------------------------ shell
def _cli(module: str) -> click.Command | None:
    targets = {"hpcgpu": ("hpcgpu.cli", "main"), "hpcgpu.mpi": ("hpcgpu.mpi.__main__", "main"),
               "hpcgpu.jobspec.examples": ("hpcgpu.jobspec.examples", "main")}
    if module not in targets:
        return None
    name, attribute = targets[module]
    return getattr(importlib.import_module(name), attribute)


def _parse(command: click.Command, args: list[str], prog: str) -> None:
    """Parse ``args`` as click would, without running the command (``--help`` is fine)."""
    try:
        ctx = command.make_context(prog, list(args))
    except click.exceptions.Exit as exit_:
        assert exit_.exit_code == 0
        return
    with ctx:
        if isinstance(command, click.Group):
            protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
            rest = [*protected, *ctx.args]
            name, sub, sub_args = command.resolve_command(ctx, rest)
            _parse(sub, sub_args, f"{prog} {name}")


def _repository_file(word: str, block: Block) -> None:
    if "/" in word and not word.startswith(("/", "-", "$")) and "=" not in word:
        assert (ROOT / word).exists(), f"{block.id}: {word} does not exist in the repository"


def _check_command(words: list[str], block: Block) -> None:
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # VAR=value prefixes
    if not words or words[0] in ("pip", "pip3", "conda", "mamba"):
        return  # installs: not parsed
    for i, word in enumerate(words):
        if word == "hpcgpu":
            return _parse(_cli("hpcgpu"), words[i + 1:], "hpcgpu")
        if word in ("python", "python3") and words[i + 1:i + 2] == ["-m"]:
            module = words[i + 2]
            command = _cli(module)
            if command is None:
                assert importlib.util.find_spec(module), f"{block.id}: no module {module}"
                return
            return _parse(command, words[i + 3:], f"python -m {module}")
        if word in ("python", "python3", "bash") and i + 1 < len(words):
            return _repository_file(words[i + 1], block)
    if words[0] in ("sbatch", "qsub", "bsub", "srun", "mpirun"):
        for word in words[1:]:
            _repository_file(word, block)
        batch = [i for i, w in enumerate(words) if w.startswith("jobscripts/") and "/cluster/" not in w]
        if words[0] == "sbatch" and batch:  # the batch examples pass their arguments to hpcgpu run
            _parse(_cli("hpcgpu"), ["run", *words[batch[0] + 1:]], "hpcgpu")


@pytest.mark.parametrize("block", _blocks("bash"))
def test_shell_block(block: Block, request, tmp_path):
    syntax = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    assert syntax.returncode == 0, f"{block.id}: {syntax.stderr}"
    if block.not_run:
        for words in commands(block.text):
            _check_command(words, block)
        return
    text = block.runnable_text()
    _needs_schedulers(request, text)
    work = tmp_path / "work"  # the repository's files, read where the docs name them
    work.mkdir()
    for entry in ROOT.iterdir():
        if not entry.name.startswith("."):
            (work / entry.name).symlink_to(entry)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work,
                          env=_environment(tmp_path), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


# ------------------------------------------------------------------ yaml
@pytest.mark.parametrize("block", _blocks("yaml"))
def test_yaml_block(block: Block):
    assert yaml.safe_load(block.text) is not None, f"{block.id}: empty YAML"


# ------------------------------------------------------------------ the checker itself
def test_the_checks_fail_on_broken_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n    indented\n\n<!-- not-run: needs a GPU -->\n```bash\n"
                    "hpcgpu jobscript slurm --no-such-option\n```\n\n```\nx\n```\n"
                    "<!-- run-with: 500 => 5 -->\n```python\nx = 50\n```\n")
    import docblocks

    root = docblocks.ROOT
    try:
        docblocks.ROOT = tmp_path
        shell, untagged, python = blocks_of(page)
        assert indented_code(page) == [3]
        below = tmp_path / "below.md"
        below.write_text("```bash\nsbatch x\n```\n<!-- not-run: below -->\n\n```text\n"
                         "<!-- not-run: inside a block -->\n```\n")
        assert stray_markers(below) == [4] and stray_markers(page) == []
    finally:
        docblocks.ROOT = root
    assert shell.not_run == "needs a GPU" and untagged.language == ""
    with pytest.raises(click.UsageError, match="no-such-option"):
        for words in commands(shell.text):
            _check_command(words, shell)
    with pytest.raises(AssertionError, match="does not occur"):
        python.runnable_text()
    with pytest.raises(ModuleNotFoundError):
        _check_python_without_running(Block("x", 1, "python", "from hpcgpu.nope import x\n", "GPU"))
    walkthrough = tmp_path / "walkthrough.md"
    walkthrough.write_text("<!-- continues: nothing above -->\n```python\nx = 1\n```\n"
                           "<!-- run-with: 1 => 2 -->\n```python\nx = 1\n```\n"
                           "<!-- continues: the block above -->\n```python\nprint(x)\n```\n")
    try:
        docblocks.ROOT = tmp_path
        orphan, first, second = blocks_of(walkthrough)
    finally:
        docblocks.ROOT = root
    assert orphan.unknown_markers and not first.unknown_markers
    assert second.runnable_text() == "x = 2\nprint(x)\n" and how_checked(second).startswith("ran")
    # the continued block runs once, as the head of the block below: it is no test of its own
    assert first.continued and second.continues is first and not orphan.continued
    assert how_checked(first) == "ran: python block.py, as the start of the block below"


def test_a_failing_python_block_fails(tmp_path, block_server):
    done = _run_as_script("from distributed import LocalCluster\n"
                          "cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=None)\n"
                          "raise ValueError('the block is wrong')\n", tmp_path, block_server)
    assert done.returncode == 1 and "ValueError: the block is wrong" in done.stderr
    done = _run_as_script("import sys\nprint('out'); print('err', file=sys.stderr)\n"
                          "undefined_name\n", tmp_path, block_server)  # fresh globals: no preload's names
    assert (done.returncode, done.stdout) == (1, "out\n") and "NameError: name 'undefined_name'" in done.stderr
    assert _run_as_script("raise SystemExit(7)\n", tmp_path, block_server).returncode == 7


#: what a block can see of the process it runs in; run by the server and by a real
#: ``python block.py``, it must print the same
SEEN = """\
import json, multiprocessing.process, os, sys, atexit
atexit.register(lambda: print("atexit ran"))
print(json.dumps({"name": __name__, "file": __file__, "argv": sys.argv, "path0": sys.path[0],
                  "path": [p for p in sys.path[1:] if "site-packages" not in p], "cwd": os.getcwd(),
                  "env": {k: v for k, v in os.environ.items() if k != "_"},
                  "stdin": sys.stdin.read(), "original_dir": multiprocessing.process.ORIGINAL_DIR,
                  "main": sys.modules["__main__"] is sys.modules[__name__],
                  "globals": {k: repr(v) for k, v in globals().items() if k != "__builtins__"},
                  "builtins": repr(__builtins__)}))
"""


def test_a_block_sees_what_python_block_py_gives(tmp_path, block_server):
    real, forked = tmp_path / "real", tmp_path / "forked"
    real.mkdir(), forked.mkdir()
    (real / "block.py").write_text(SEEN)
    by_python = subprocess.run([sys.executable, "block.py"], cwd=real, env=_environment(real),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    by_server = _run_as_script(SEEN, forked, block_server)
    assert by_python.returncode == by_server.returncode == 0, (by_python.stderr, by_server.stderr)
    seen = [re.sub(" at 0x[0-9a-f]+", "", done.stdout.replace(str(directory), "<dir>"))
            for done, directory in ((by_server, forked), (by_python, real))]
    assert seen[0] == seen[1]
    assert by_server.stdout.endswith("atexit ran\n") and by_server.stderr == by_python.stderr == ""

