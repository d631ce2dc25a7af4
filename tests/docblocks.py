"""The code blocks of README.md and docs/*.md, with the markers that say how to check them.

The convention (written for users of the docs in docs/testing.md):

- Every fenced block has a language: ``python``, ``bash`` (also ``sh``/``shell``),
  ``yaml``, or ``text`` for output and synopses that are not meant to be run.
- Blocks run as written: a Python block is saved as ``block.py`` and run with
  ``python block.py``, as a reader would paste it into a file (so a block that starts
  ``LocalGPUCluster`` needs ``if __name__ == "__main__":``, for the workers' spawn). A block that cannot run on a CPU machine with the local SLURM and
  Grid Engine is marked, on the line(s) right above its fence, with
  ``<!-- not-run: the reason -->``: it is then only checked (Python compiled and its
  ``hpcgpu`` imports resolved; shell through ``bash -n``, every ``hpcgpu`` /
  ``python -m hpcgpu...`` command parsed by click without running, scripts and job files
  it names must exist).
- ``<!-- run-with: OLD => NEW -->`` (repeatable) replaces text before the block runs,
  e.g. to shrink a 2 TB array; each OLD must occur in the block, so a stale marker fails.
- ``<!-- continues: the block above -->``: a Python block that goes on with the names of the
  Python block above it (a walkthrough's second half) runs after that block's text, in one
  ``block.py``.
- Indented (4-space) code blocks are refused: they have no language to check them by.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["Block", "ROOT", "pages", "blocks_of", "indented_code", "stray_markers", "commands",
           "LANGUAGES", "how_checked", "inventory"]

ROOT = Path(__file__).resolve().parents[1]

LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash",
             "shell": "bash", "yaml": "yaml", "yml": "yaml", "text": "text"}

_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)[^\n]*$")
_MARKER = re.compile(r"^<!--\s*([\w-]+)\s*:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its markers."""

    page: str
    line: int
    language: str
    text: str
    not_run: str | None = None
    substitutions: tuple[tuple[str, str], ...] = ()
    unknown_markers: tuple[str, ...] = field(default=())
    #: the block it continues (``continues`` marker), whose runnable text runs before its own
    continues: Block | None = None
    #: a runnable block below continues this one: it runs as the head of that block's script,
    #: not once more alone (the same code, the same cluster, the same checks)
    continued: bool = False

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def runnable_text(self) -> str:
        """The text with the ``run-with`` substitutions applied (each must match), after
        the text of the block it continues."""
        text = self.text
        for old, new in self.substitutions:
            if old not in text:
                raise AssertionError(f"{self.id}: run-with {old!r} does not occur in the block")
            text = text.replace(old, new)
        return (self.continues.runnable_text() if self.continues else "") + text


def pages() -> list[Path]:
    """README.md and every page of docs/, so new pages are checked without a change here."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def _markers(lines: list[str], fence: int) -> tuple[str | None, tuple, tuple, bool]:
    not_run, subs, unknown, continues = None, [], [], False
    i = fence - 1
    while i >= 0 and _MARKER.match(lines[i].strip()):
        name, value = _MARKER.match(lines[i].strip()).groups()
        if name == "not-run":
            not_run = value
        elif name == "run-with" and "=>" in value:
            old, new = (part.strip() for part in value.split("=>", 1))
            subs.insert(0, (old, new))
        elif name == "continues":
            continues = True
        else:
            unknown.append(lines[i].strip())
        i -= 1
    return not_run, tuple(subs), tuple(unknown), continues


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = str(path.relative_to(ROOT))
    blocks, i, above = [], 0, None  # above: the last Python block that runs
    while i < len(lines):
        match = _FENCE.match(lines[i].strip())  # fences inside list items are indented
        if not match:
            i += 1
            continue
        fence, language = match.groups()
        end = next((j for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(fence[0] * len(fence))
                    and not lines[j].strip().strip(fence[0])), len(lines))
        not_run, subs, unknown, continues = _markers(lines, i)
        text = textwrap.dedent("\n".join(lines[i + 1:end]) + "\n")  # a block in a list item
        if continues and above is None:
            unknown += ("<!-- continues --> with no Python block above",)
        if continues and above is not None and not not_run:
            at = next(k for k, b in enumerate(blocks) if b is above)
            blocks[at] = above = replace(above, continued=True)
        block = Block(page, i + 1, language.lower(), text, not_run, subs, unknown,
                      above if continues else None)
        blocks.append(block)
        if LANGUAGES.get(block.language) == "python":
            above = None if block.not_run else block
        i = end + 1
    return blocks


def indented_code(path: Path) -> list[int]:
    """Line numbers of indented code blocks (4 spaces after a blank line, outside lists and
    fences): they should be fenced blocks with a language."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, in_fence, in_list = [], False, False
    for n, line in enumerate(lines):
        stripped = line.strip()
        if _FENCE.match(stripped):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if re.match(r"^\s{0,3}([-*+]|\d+[.)])\s", line):
            in_list = True
        elif not stripped:
            pass
        elif not line.startswith(" "):
            in_list = False
        if (line.startswith("    ") and stripped and n > 0 and not lines[n - 1].strip()
                and not in_list):
            found.append(n + 1)
    return found


def stray_markers(path: Path) -> list[int]:
    """Line numbers of markers that no fence follows: a ``not-run`` put below its block
    applies to nothing, and the block it was meant for then runs."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    found, in_fence = [], False
    for n, line in enumerate(lines):
        in_fence ^= bool(_FENCE.match(line))
        if _MARKER.match(line) and not in_fence:
            following = next((x for x in lines[n + 1:] if not _MARKER.match(x)), "")
            if not _FENCE.match(following) or not following.strip("`~"):
                found.append(n + 1)
    return found


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell block: continuations joined, comments dropped, split
    at ``&&``, ``||``, ``;`` and ``|``; ``<`` and the file after it kept as words."""
    import shlex

    joined = re.sub(r"\\\n", " ", script)
    out: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for word in lexer:
            if word in ("&&", "||", ";", "|", "&"):
                if current:
                    out.append(current)
                current = []
            else:
                current.append(word)
        if current:
            out.append(current)
    return out


#: what the test does with a block of each language that is not marked ``not-run``
_RUN = {"python": "ran: python block.py", "bash": "ran: bash -euo pipefail",
        "yaml": "parsed as YAML", "text": "not run: output or a synopsis (text)"}


def how_checked(block: Block) -> str:
    r"""What the docs test does with ``block``, and why when it does not run it.

    >>> how_checked(Block("p.md", 3, "python", "x = 1\n"))
    'ran: python block.py'
    >>> how_checked(Block("p.md", 9, "sh", "hpcgpu --help\n", not_run="needs a GPU"))
    'checked only (bash -n, commands parsed): needs a GPU'
    """
    language = LANGUAGES.get(block.language, block.language)
    if block.continued:
        return "ran: python block.py, as the start of the block below"
    if block.continues is not None and not block.not_run:
        return "ran: python block.py, after the block above"
    if block.not_run:
        how = {"python": "compiled, hpcgpu imports resolved",
               "bash": "bash -n, commands parsed"}.get(language, "not run")
        return f"checked only ({how}): {block.not_run}"
    return _RUN.get(language, f"unknown language {block.language!r}")


def inventory(blocks: list[Block]) -> list[str]:
    """One line per block, ``page:line  language  how``: the report the docs test prints."""
    width = max((len(b.id) for b in blocks), default=0)
    return [f"{b.id:<{width}}  {LANGUAGES.get(b.language, b.language):<6}  {how_checked(b)}"
            for b in blocks]
