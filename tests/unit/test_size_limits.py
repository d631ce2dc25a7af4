"""The house's size rules (docs/architecture.md): no module of hpcgpu over 300 lines, no
function over 50 (docstring included), so that each stays readable in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hpcgpu"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 50


def test_no_module_over_300_lines_and_no_function_over_50():
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(PACKAGE.parent)
        if source.count("\n") > MAX_MODULE_LINES:
            over.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    over.append(f"{name}:{node.lineno} {node.name}(): {length} lines")
    assert not over, "split these by concept:\n" + "\n".join(over)
