"""The package's layers: no module imports from a layer above its own, and no import circle.

Imports inside functions count; ``if TYPE_CHECKING:`` imports do not (they never run).
docs/architecture.md says the same table in words (checked here: one row per layer's packages).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hpcgpu"

#: package -> layer, lowest first; a module may import from its own layer or below.
LAYERS = {
    "hpcgpu.system": 0,
    "hpcgpu.jobspec": 1,
    "hpcgpu.schedulers": 1,
    "hpcgpu.launchers": 1,
    "hpcgpu.network": 1,
    "hpcgpu.array": 2,
    "hpcgpu.dataframe": 2,
    "hpcgpu.worker": 3,
    "hpcgpu.runner": 4,
    "hpcgpu.mpi": 4,
    "hpcgpu.cluster": 5,
    "hpcgpu.cluster.local": 6,
    "hpcgpu.cluster.batch": 6,
    "hpcgpu.doctor": 7,
    "hpcgpu.bench": 7,
    "hpcgpu.cli": 8,
    "hpcgpu": 9,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The hpcgpu modules that ``name`` imports, anywhere in its file."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = _type_checking_lines(tree)

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(known(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found.update(known(f"{base}.{alias.name}") or known(base) for alias in node.names)
    return {m for m in found if m and m.startswith("hpcgpu") and m != name}


def layer_of(module: str) -> tuple[str, int]:
    owner = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return owner, LAYERS[owner]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_every_package_has_a_layer():
    unplaced = {m for m in _modules() if layer_of(m)[0] == "hpcgpu" and m.count(".") > 1}
    assert not unplaced, f"modules in no layer of LAYERS: {sorted(unplaced)}"


def test_no_import_from_a_higher_layer():
    upward = []
    for module, targets in _graph().items():
        owner, level = layer_of(module)
        for target in targets:
            target_owner, target_level = layer_of(target)
            if target_level > level:
                upward.append(f"{module} ({owner}, layer {level}) imports {target} "
                              f"({target_owner}, layer {target_level})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_circle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_the_checks_see_a_circle_and_an_upward_import(tmp_path):
    """The graph finds imports inside functions and relative ones (so the checks can fail)."""
    pkg = tmp_path / "hpcgpu" / "system"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("def f():\n    from hpcgpu.cli import main\n")
    (pkg / "b.py").write_text("from . import a\n")
    modules = {"hpcgpu.system.a": pkg / "a.py", "hpcgpu.system.b": pkg / "b.py", "hpcgpu.cli": pkg / "a.py"}
    assert imports_of("hpcgpu.system.a", pkg / "a.py", modules) == {"hpcgpu.cli"}
    assert imports_of("hpcgpu.system.b", pkg / "b.py", modules) == {"hpcgpu.system.a"}
    assert layer_of("hpcgpu.cli")[1] > layer_of("hpcgpu.system.a")[1]


def test_docs_architecture_shows_each_package_once_at_its_layer():
    """docs/architecture.md's table is LAYERS: every package on one row, at its layer."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    shown: dict[str, int] = {}
    for layer, packages in re.findall(r"^\| *(\d+) *\|([^|]*)\|", text, re.M):
        for package in re.findall(r"`(hpcgpu[\w.]*)`", packages):
            assert package not in shown, f"{package} on two rows of docs/architecture.md"
            shown[package] = int(layer)
    assert shown == LAYERS, "docs/architecture.md's layer table and LAYERS differ"
