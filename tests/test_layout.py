"""The three wings: imports run checks -> export -> runtime -> common, with no circle anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.scripts import ROOT

# What each wing may import from codes/ (its own modules included).
ALLOWED = {
    "common": {"common"},
    "runtime": {"runtime", "common"},
    "export": {"export", "runtime", "common"},
    "checks": {"checks", "export", "runtime", "common"},
    "corpus": {"corpus", "runtime", "common"},
    "serve": {"serve", "runtime", "common"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The codes.* modules a file imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in (ROOT / "codes").rglob("*.py")}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def test_every_module_lives_in_a_wing_and_imports_only_downwards():
    graph = import_graph()
    stray = [name for name in graph if name != "codes" and name.split(".")[1] not in ALLOWED]
    assert not stray, f"modules outside the wings: {stray}"
    wrong = [(name, target) for name, targets in graph.items() if name != "codes"
             for target in targets if target != "codes" and target.split(".")[1] not in ALLOWED[name.split(".")[1]]]
    assert not wrong, f"imports against the wings' direction: {wrong}"


def test_no_import_circle():
    graph = import_graph()
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                return path + [name, target]
            if target not in state and (circle := visit(target, path + [name])):
                return circle
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state:
            circle = visit(name, [])
            assert circle is None, " -> ".join(circle)
