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


# The serve wing's lower half (codes/serve/voices/, the loaded model, a request's sentences) knows nothing
# of the state the doors share, so the walk from create_app runs downhill (issue 34: it climbed back 6 times).
BELOW_THE_STATE = ("codes.serve.voices", "codes.serve.loaded_model", "codes.serve.sentences",
                   "codes.serve.segments")
THE_STATE_AND_ABOVE = {"codes.serve.state", "codes.serve.lifecycle", "codes.serve.app", "codes.serve.guard", "codes.serve.wyoming",
                       "codes.serve.mcp", "codes.serve.stream_door", "codes.serve.startup", "codes.serve.run", "codes.serve.replica"}
DOORS = ("app", "stream_door", "wyoming", "mcp", "lifecycle")
# What only the resolver (codes/serve/voices/resolver.py Voices) may touch to make a voice from a name.
RESOLVERS_OWN = {"pins", "load_saved", "saved_path", "clone"}


def reached(graph: dict[str, set[str]], name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_serve_wing_imports_downhill_from_the_doors():
    graph = import_graph()
    below = [name for name in graph if any(name == low or name.startswith(low + ".") for low in BELOW_THE_STATE)]
    assert "codes.serve.voices.resolver" in below and "codes.serve.loaded_model" in below
    upward = {name: sorted(reached(graph, name) & THE_STATE_AND_ABOVE) for name in below}
    assert not {name: up for name, up in upward.items() if up}, "modules below the state reach above it"


def test_doors_turn_a_voice_name_into_a_voice_only_through_the_resolver():
    for door in DOORS:
        path = ROOT / "codes" / "serve" / f"{door}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        touched = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} & RESOLVERS_OWN
        assert not touched, f"{door}.py makes voices itself ({sorted(touched)}); go through state.voices (Voices)"
        assert "codes.serve.voices.pins" not in imports_of(path, set(import_graph())), door
