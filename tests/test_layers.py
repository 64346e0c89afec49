"""The structure of the code base, drawn from its imports (DESIGN.md §1).

Every import points down the layers below; no package imports another's private
(``_``-prefixed) module; modules inside a package import each other without a
cycle; the service never imports the tools, benchmarks or tests; and the tools
never import the benchmarks or tests (what both need, such as the process
harness, lives in ``tools``); and no service module imports a package's
``testing`` module, where the test doubles live.  Imports
are read from the source (every ``import`` statement, also inside functions and
``if TYPE_CHECKING:`` blocks), so a lazy import cannot hide an upward one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Lower numbers are further down; a package may import only lower layers.
LAYERS = {
    "common": 0,
    "journal": 1,
    "entrylog": 1,
    # The replication protocol and the stream codec and client are pure: they
    # know the error tree and nothing of the engine (the node wires them to it).
    "cluster": 1,
    "streaming": 1,
    "ledger": 2,
    "compaction": 3,
    "offload": 3,
    "node": 4,
    "app": 5,
    "cli": 6,
}
# Used by tests, benchmarks and the quick start only; the service never imports them.
TOOLS = {"tools", "bench", "tests"}


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    root = REPO / package
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every module name ``module`` imports, relative imports resolved."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            # `from pkg import _private` names a module too
            yield from (f"{target}.{alias.name}" for alias in node.names
                        if alias.name.startswith("_"))


def _all_imports() -> list[tuple[str, str]]:
    found = []
    for package in LAYERS:
        for module, path in _modules(package):
            found.extend((module, imported) for imported in _imports(module, path))
    return found


IMPORTS = _all_imports()


def test_every_package_is_placed_in_a_layer() -> None:
    top_level = {p.name for p in REPO.iterdir()
                 if (p / "__init__.py").exists() and p.name not in ("openapi",)}
    assert top_level - set(LAYERS) - TOOLS == set()


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_point_down(package: str) -> None:
    upward = []
    for module, imported in IMPORTS:
        if module.split(".")[0] != package:
            continue
        top = imported.split(".")[0]
        if top == package:
            continue
        if top in TOOLS:
            upward.append(f"{module} imports {imported} (a tool, not the service)")
        elif top in LAYERS and LAYERS[top] >= LAYERS[package]:
            upward.append(f"{module} imports {imported} (layer {LAYERS[top]} "
                          f">= {LAYERS[package]})")
    assert upward == []


def test_tools_import_neither_benchmarks_nor_tests() -> None:
    # bench and tests import tools (the local S3, etcd, servers and clusters);
    # the reverse would make the quick start depend on the benchmarks.
    upward = [f"{module} imports {imported}"
              for module, path in _modules("tools")
              for imported in _imports(module, path)
              if imported.split(".")[0] in {"bench", "tests"}]
    assert upward == []


def _is_testing(module: str) -> bool:
    return "testing" in module.split(".")[1:]


def test_the_service_never_imports_a_test_double() -> None:
    # Test doubles (in-memory and faulty devices) sit in ``<package>.testing``
    # modules, type-checked beside the seam they implement; nothing else in the
    # service may reach them, so none can stand in for the real device by mistake.
    doubles = [f"{module} imports {imported}" for module, imported in IMPORTS
               if _is_testing(imported) and not _is_testing(module)]
    assert doubles == []


def test_the_test_doubles_are_in_testing_modules() -> None:
    # What the doubles are called, found outside a ``testing`` module, means a
    # new one was put with the production code.
    misplaced = [f"{module} defines {node.name}"
                 for package in LAYERS for module, path in _modules(package)
                 if not _is_testing(module)
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.ClassDef)
                 and node.name.startswith(("Memory", "Faulty", "Fake", "Mock", "Stub"))]
    assert misplaced == []


def test_no_package_imports_another_packages_private_modules() -> None:
    private = [f"{module} imports {imported}" for module, imported in IMPORTS
               if imported.split(".")[0] in LAYERS
               and imported.split(".")[0] != module.split(".")[0]
               and any(part.startswith("_") for part in imported.split(".")[1:])]
    assert private == []


def test_modules_of_a_package_import_each_other_without_a_cycle() -> None:
    known = {module for package in LAYERS for module, _ in _modules(package)}
    edges: dict[str, set[str]] = {}
    for module, imported in IMPORTS:
        # Importing a package runs its __init__, which is where cycles hide.
        target = imported
        while target and target not in known:
            target = target.rpartition(".")[0]
        same_package = target and target.split(".")[0] == module.split(".")[0]
        # A module may import its own package (its parent); that is no cycle.
        if same_package and target != module and not module.startswith(target + "."):
            edges.setdefault(module, set()).add(target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_tools_check_sees_an_import_of_the_benchmarks(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from bench._harness import percentile\n"
                      "if False:\n    import bench.soak\n")
    found = set(_imports("tools.partitions.probe", source))
    assert {"bench._harness", "bench.soak"} <= found


def test_the_layer_check_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    source = tmp_path / "_probe.py"
    source.write_text("def f():\n    from app import create_app\n"
                      "if False:\n    from ..node import _node\n")
    found = set(_imports("ledger._probe", source))
    assert {"app", "node", "node._node"} <= found
