"""The unit tier's report: after tests/unit/test_docs.py, every code block of the docs and
what was done with it (ran, parsed, or only checked, and why)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])]
    if not any("test_docs.py::test_python_block" in getattr(r, "nodeid", "") for r in reports):
        return
    from docblocks import blocks_of, inventory, pages

    blocks = [block for page in pages() for block in blocks_of(page)]
    terminalreporter.section("code blocks of README.md and docs/: ran, parsed, or checked only (why)")
    for line in inventory(blocks):
        terminalreporter.write_line(line)
