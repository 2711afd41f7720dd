"""The house rules of ``resilient/``, checked on its source: small modules, small functions, imports one way.

* No module over 350 lines and no function over 80 lines, so each reads in one sitting.
* Imports run one way: a room (top-level module or subpackage; in ``engine/``, each folder and module)
  imports only from its own layer or the layers below it (``LAYERS``, lowest first), and no module
  imports itself back through others (no cycle, counting imports made inside functions and leaving out
  ``if TYPE_CHECKING:`` blocks, which never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "resilient"
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 80


# Lowest first. A room may import from its own layer and the ones below, never from one above. The engine's
# rooms: the orchestrator (a plain generator with no I/O) and its terms under everything; the healing paths;
# the chain's rules; a run and what a worker keeps in memory about runs (one layer: the run's parts use the
# worker state, which holds the run memory and the shutdown signal they define); the facade on top.
LAYERS: list[set[str]] = [
    {"ids", "limits", "logs", "typed_answers", "settings"},
    {"protocol", "telemetry"},
    {"storage"},
    {"agents", "checkpoints"},
    {"engine.orchestration"},
    {"engine.heal"},
    {"engine.chain"},
    {"engine.run", "engine.worker_state"},
    {"engine.activities", "engine"},
    {"http"},
    {"bootstrap"},
    {"functions"},
]


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


MODULES = dict(modules())


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def runtime_imports(name: str, path: Path) -> set[str]:
    """The ``resilient`` modules ``name`` imports when it runs (at import or inside a function)."""
    tree = ast.parse(path.read_text())
    type_only = {id(inner) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 for inner in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {known_module(f"{node.module}.{alias.name}") for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {known_module(alias.name) for alias in node.names}
    return {module for module in found if module and module != name}


def known_module(dotted: str) -> str:
    """The module of ``resilient`` that ``dotted`` (a module, or a name in one) lives in; "" if none."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted


def room(module: str) -> str:
    """``resilient.storage.items`` → ``storage``; in the engine one level deeper: ``engine.run``."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "engine":
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else ""


def layer(module: str) -> int:
    name = room(module)
    for level, rooms in enumerate(LAYERS):
        if name in rooms:
            return level
    raise AssertionError(f"{module}: its room {name!r} has no layer in LAYERS")


def test_no_module_is_longer_than_350_lines() -> None:
    too_long = {relative(path): lines for path in MODULES.values()
                if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not too_long, too_long


def test_no_function_is_longer_than_80_lines() -> None:
    too_long = {f"{relative(path)}::{fn.name}": lines for path in MODULES.values()
                for fn in functions(ast.parse(path.read_text()))
                if (lines := (fn.end_lineno or fn.lineno) - fn.lineno + 1) > MAX_FUNCTION_LINES}
    assert not too_long, too_long


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_imports_only_from_its_layer_or_below(name: str) -> None:
    upward = sorted(module for module in runtime_imports(name, MODULES[name]) if layer(module) > layer(name))
    assert not upward, f"{name} imports from a higher layer: {upward}"


def test_no_import_cycle() -> None:
    graph = {name: runtime_imports(name, path) for name, path in MODULES.items()}
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every import is walked

    def walk(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                cycle = [*path[path.index(imported):], imported]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                walk(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])


def test_the_rules_see_what_they_check() -> None:
    """The checks above walk the real package (a wrong path would make every one of them pass vacuously)."""
    assert "resilient.engine.run.phase" in MODULES and "resilient.storage.eventlog" in MODULES
    assert "resilient.engine.run.phase" in runtime_imports("resilient.engine.activities",
                                                           MODULES["resilient.engine.activities"])
