"""Imports inside rag/ point one way, and no module reaches for another one's private names.

The stages are subpackages, in the order a question passes through them (LAYERS); a module
may import from its own subpackage or one below it, never from one above.

A cycle (even through an import inside a function) means two modules cannot be read,
tested or replaced apart, and which one loads first decides whether the program starts.
The graph is read from the source with ``ast``, so every import counts: top-level, inside a
function, or under ``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "rag"
# Lowest first. "" is rag/__init__.py, the library API: over the pipeline, under eval and
# the interfaces, which wrap it.
LAYERS = ("core", "reader", "stores", "indexer", "retriever", "verifier", "answer", "generator",
          "pipeline", "", "eval", "interfaces")


def module_name(path: Path) -> str:
    """``rag/stores/postgres.py`` -> ``rag.stores.postgres``; a package is its ``__init__``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, str, int]]:
    """(imported rag module, name taken from it or '', line) for each import in one file.

    ``from rag import x`` imports the module ``rag.x`` when there is one; a relative import
    is resolved against the importing module's package.
    """
    package = name if known[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in known:  # a submodule, not a name in base
                    yield f"{base}.{alias.name}", "", node.lineno
                else:
                    yield base, alias.name, node.lineno


def graph() -> dict[str, set[str]]:
    """Module -> the rag modules it imports (itself excluded)."""
    known = modules()
    return {name: {target for target, _, _ in imports(name, path, known) if target != name}
            for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None: depth-first search in a stable order."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done (no cycle through it)
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def all_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Cycles until none is left, each found after cutting the first edge of the one before:
    every tangle is named at once, not one per run."""
    edges = {node: set(targets) for node, targets in edges.items()}
    found = []
    while cycle := find_cycle(edges):
        found.append(cycle)
        edges[cycle[0]].discard(cycle[1])
    return found


def test_the_checker_sees_cycles_and_resolves_modules() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert all_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [
        ["a", "b", "a"], ["c", "d", "c"]]
    edges = graph()
    assert "rag.stores.folder" in edges["rag.indexer.folders"]  # `from rag import store` is the module
    assert "rag.stores.pg_schema" in edges["rag.stores.postgres"]


def test_rag_imports_have_no_cycle() -> None:
    cycles = all_cycles(graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_another_modules_private_name() -> None:
    known = modules()
    private = [f"{path.relative_to(ROOT)}:{line}: from {target} import {taken}"
               for name, path in known.items()
               for target, taken, line in imports(name, path, known)
               if taken.startswith("_") and target != name]
    assert not private, "private names imported across modules:\n" + "\n".join(private)


def layer(module: str) -> str:
    """``rag.reader.chunking`` -> ``read``; ``rag`` itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Each import from a subpackage above the importer's, as 'a -> b'."""
    return [f"{src} -> {dst}" for src, targets in sorted(edges.items()) for dst in sorted(targets)
            if LAYERS.index(layer(dst)) > LAYERS.index(layer(src))]


def test_every_module_sits_in_a_stage_subpackage() -> None:
    loose = [name for name in modules() if layer(name) not in LAYERS]
    assert not loose, f"modules outside the stage subpackages: {loose}"
    assert set(modules()) & {"rag", "rag.pipeline"} == {"rag", "rag.pipeline"}
    assert {layer(name) for name in modules()} == set(LAYERS)


def test_imports_point_down_the_stages() -> None:
    assert upward_imports({"rag.core.text": {"rag.reader.passages"}}) == [
        "rag.core.text -> rag.reader.passages"]
    upward = upward_imports(graph())
    assert not upward, "imports from a later stage:\n" + "\n".join(upward)


def test_each_subpackage_says_what_it_owns() -> None:
    for init in sorted((ROOT / PACKAGE).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 5, f"{init.relative_to(ROOT)} has no docstring"
