"""Which files of a Sphinx project are reStructuredText, read without importing docutils.

A Sphinx ``conf.py`` says so in ``source_suffix`` (a string, a list, or a mapping to
``"restructuredtext"``; Django, for one, keeps its docs in ``.txt`` files). It is read
with ``ast``, never executed: only a literal value assigned to ``source_suffix`` counts,
and a ``conf.py`` that does not parse is no Sphinx configuration.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

# Where a Sphinx project keeps conf.py, relative to the docs folder: the folder itself, or
# the usual layouts of a repository's docs.
CONF_PLACES = ("", "source", "doc", "docs", "docs/source", "doc/source")
DEFAULT_SUFFIXES = (".rst",)


def sphinx_suffixes(conf: Path) -> tuple[str, ...] | None:
    """The reStructuredText suffixes a Sphinx ``conf.py`` names (``(".rst",)`` when it names
    none), or None when the file is not a readable Sphinx configuration."""
    try:
        tree = ast.parse(conf.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    found: tuple[str, ...] = DEFAULT_SUFFIXES
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id != "source_suffix":
            continue
        try:
            value = ast.literal_eval(value_node)
        except ValueError:
            continue  # computed, not written: Sphinx's default
        found = _suffixes(value) or found
    return found


def _suffixes(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, dict):
        value = [k for k, parser in value.items() if parser in ("restructuredtext", "rst")]
    if not isinstance(value, list | tuple):
        return ()
    return tuple(s.lower() for s in value if isinstance(s, str) and s.startswith("."))


_RST_SIGNS = re.compile(r"^\s*\.\. [\w:-]+::|^\s*\.\. _[^:]+:|(?<![\w:-]):[\w-]+(?::[\w-]+)*:`[^`]+`|``[^`]+``|::$",
                        re.MULTILINE)


def looks_like_rst(text: str) -> bool:
    """Whether text uses reStructuredText markup (a directive, a target, a role, a double
    backquote literal, a literal block's ``::``): a ``.txt`` page of a Sphinx project."""
    return _RST_SIGNS.search(text) is not None
