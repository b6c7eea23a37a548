"""The three wings: imports run checks -> export -> runtime -> common, with no circle anywhere."""

from __future__ import annotations

import ast

import pytest
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


# The serve wing's folders, top to bottom (docs/DESIGN.md §serve-map): each imports only its own folder and those
# below it. Inside the doors, a door imports no other door but the shared pieces (the HTTP door mounts the stream
# door's route on its app).
SERVE_FLOORS = ("launch", "doors", "core", "voices", "edge")
DOORS_SHARED = {"codes.serve.doors.contract", "codes.serve.doors.guard", "codes.serve.doors.wyoming_wire",
                "codes.serve.doors.playground", "codes.serve.doors.stream"}
# The lower half of the core (a request's sentences and segments, the loaded model) and the voices know nothing
# of the state the doors share, so the walk from create_app runs downhill (issue 34: it climbed back 6 times).
BELOW_THE_STATE = ("codes.serve.voices", "codes.serve.core.loaded_model", "codes.serve.core.sentences",
                   "codes.serve.core.script_stream", "codes.serve.core.kept_pieces")
DOORS = ("doors/http", "doors/stream", "doors/wyoming", "doors/mcp", "core/lifecycle")
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


def serve_floor(name: str) -> int | None:
    parts = name.split(".")
    return SERVE_FLOORS.index(parts[2]) if parts[:2] == ["codes", "serve"] and len(parts) > 2 and parts[2] in SERVE_FLOORS else None


def test_the_serve_wing_is_folders_whose_imports_run_down():
    graph = import_graph()
    assert {name.split(".")[2] for name in graph if name.startswith("codes.serve.")} == set(SERVE_FLOORS)
    upward = [(name, target) for name, targets in graph.items() for target in targets
              if serve_floor(name) is not None and serve_floor(target) is not None
              and serve_floor(target) < serve_floor(name)]
    assert not upward, f"imports up the serve wing's floors: {upward}"
    sideways = [(name, target) for name, targets in graph.items() for target in targets
                if name.startswith("codes.serve.doors.") and target.startswith("codes.serve.doors.")
                and target not in DOORS_SHARED and not target.startswith("codes.serve.doors.playground")]
    assert not sideways, f"a door imports another door: {sideways}"
    below = [name for name in graph if any(name == low or name.startswith(low + ".") for low in BELOW_THE_STATE)]
    assert "codes.serve.voices.resolver" in below and "codes.serve.core.loaded_model" in below
    above = {"codes.serve.core.state", "codes.serve.core.lifecycle"}
    climbing = {name: sorted(reached(graph, name) & above) for name in below}
    assert not {name: up for name, up in climbing.items() if up}, "modules below the state reach it"


@pytest.mark.parametrize("package", ["codes.runtime.script", "codes.runtime.book"])
def test_the_script_and_book_packages_are_entered_by_their_front_doors(package):
    inner = [(name, target) for name, targets in import_graph().items() for target in targets
             if target.startswith(package + ".") and not name.startswith(package)]
    assert not inner, f"modules past {package}'s front door: {inner}"
    for script in ("inference.py", "corpus.py", "serve.py", "eval.py"):
        imported = {node.module for node in ast.walk(ast.parse((ROOT / script).read_text(encoding="utf-8")))
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert not any(module.startswith(package + ".") for module in imported), script


def test_doors_turn_a_voice_name_into_a_voice_only_through_the_resolver():
    for door in DOORS:
        path = ROOT / "codes" / "serve" / f"{door}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        touched = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} & RESOLVERS_OWN
        assert not touched, f"{door}.py makes voices itself ({sorted(touched)}); go through state.voices (Voices)"
        assert "codes.serve.voices.pins" not in imports_of(path, set(import_graph())), door


# The runtime's folders, top to bottom (docs/layout.md): each imports only its own folder and those below it. "top" is
# the few modules at codes/runtime/ itself (the public API and what inference.py enters by); script/ and book/ drive
# them; data/ is the tables every host reads.
RUNTIME_FLOORS = ("book", "script", "top", "recognition", "model", "voices", "audio", "text", "contract", "data")
RUNTIME_FOLDERS = tuple(floor for floor in RUNTIME_FLOORS if floor != "top")


def runtime_floor(name: str) -> int | None:
    parts = name.split(".")
    if parts[:2] != ["codes", "runtime"] or len(parts) < 3:
        return None
    return RUNTIME_FLOORS.index(parts[2] if parts[2] in RUNTIME_FOLDERS else "top")


def test_the_runtime_is_folders_whose_imports_run_down():
    runtime = ROOT / "codes" / "runtime"
    assert {p.name for p in runtime.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} == set(RUNTIME_FOLDERS)
    top = sorted(p.name for p in runtime.glob("*.py"))
    assert len(top) <= 6, f"modules at the runtime's top: {top}; give each a folder"
    upward = [(name, target) for name, targets in import_graph().items() for target in targets
              if runtime_floor(name) is not None and runtime_floor(target) is not None
              and runtime_floor(target) < runtime_floor(name)]
    assert not upward, f"imports up the runtime's folders: {upward}"


@pytest.mark.parametrize("folder", [f for f in RUNTIME_FOLDERS if f not in ("script", "book", "data")])
def test_each_runtime_folder_says_what_lives_there_and_nothing_else(folder):
    body = ast.parse((ROOT / "codes" / "runtime" / folder / "__init__.py").read_text(encoding="utf-8")).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert 1 <= len(body[0].value.value.strip().splitlines()) <= 2
