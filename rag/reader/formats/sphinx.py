"""What Sphinx adds to reStructuredText, read without Sphinx (which files are
reStructuredText is rag.reader.formats.sphinx_conf's part).

- **Directives and roles docutils does not know** (``.. versionadded::``, ``.. py:function::``,
  ``.. tab::``, ``:ref:``, ``:func:``, ``:doc:``) are read as their text: a directive's
  content is parsed as the body it is, code directives give code, object descriptions
  (``.. py:data:: SECRET_KEY``) name a section, version notes read "New in version 2.0.",
  and a role shows what Sphinx would show (``:ref:`Title <label>``` -> ``Title``,
  ``:func:`~flask.url_for``` -> ``url_for``). Nothing a Sphinx page uses is dropped or
  reported as an error.
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive, directives, roles
from docutils.statemachine import StringList

# Object descriptions: each names one thing, and what follows describes it (a section).
_OBJECT_TYPES = frozenset({
    "function", "class", "method", "attribute", "data", "exception", "decorator", "module",
    "classmethod", "staticmethod", "property", "currentmodule", "confval", "envvar",
    "option", "describe", "object", "program", "type", "member", "macro", "var",
})
_CODE = frozenset({"code-block", "sourcecode", "code", "doctest", "testcode", "testsetup",
                   "testoutput", "ipython", "jupyter-execute", "prompt", "highlight"})
_VERSION_WORDS = {"versionadded": "New in version", "versionchanged": "Changed in version",
                  "deprecated": "Deprecated since version", "versionremoved": "Removed in version"}
# Lists of document names or generated tables: navigation, not text.
_NAVIGATION = frozenset({"toctree", "autosummary", "include", "literalinclude",
                         "highlight", "currentmodule", "index", "tabularcolumns", "raw"})
_DIRECTIVE = re.compile(r"^\s*\.\.\s+([\w][\w:.+-]*)::", re.MULTILINE)
_ROLE = re.compile(r"(?<![\w`]):([\w][\w:.+-]*):`")
_CODE_ROLES = frozenset({"func", "meth", "class", "attr", "data", "exc", "mod", "obj", "const",
                         "code", "file", "envvar", "command", "program", "option", "kbd",
                         "samp", "mimetype", "makevar", "py", "confval", "type", "member",
                         "macro", "var", "enum", "struct", "expr", "literal"})


def _object_name(argument: str) -> str:
    """``SECRET_KEY``, ``flask.Flask.route(rule, **options)`` -> ``flask.Flask.route``."""
    first = argument.strip().split("\n")[0]
    return first.split("(")[0].strip() or first.strip()


class _AnyOption(dict[str, Any]):
    """Every option is accepted, with its value as written."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return directives.unchanged


class SphinxDirective(Directive):
    """A directive docutils does not know, read as its text (see the module docstring)."""

    required_arguments = 0
    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = _AnyOption()

    def run(self) -> list[nodes.Node]:
        name = self.name.lower()
        kind = name.rsplit(":", 1)[-1]
        argument = self.arguments[0] if self.arguments else ""
        box = nodes.container(classes=["sphinx", kind])
        box.source, box.line = self.state_machine.get_source_and_line(self.lineno)
        if kind in _NAVIGATION:
            return []
        if kind in _CODE:
            code = nodes.literal_block("\n".join(self.content), "\n".join(self.content))
            code.line = self.content_offset + 1
            return [code] if self.content else []
        if kind in _VERSION_WORDS:
            version, _, rest = argument.partition("\n")
            note = nodes.paragraph("", f"{_VERSION_WORDS[kind]} {version.strip()}.")
            note.line, note["directive_line"] = self.lineno, True
            box += note
            if rest.strip():  # text right under the version, before any blank line
                self.state.nested_parse(StringList(rest.split("\n")), self.lineno, box)
        elif kind in _OBJECT_TYPES or kind.startswith("auto"):
            box["object"] = _object_name(argument) if argument else ""
        elif argument:
            title = nodes.paragraph("", argument.strip())
            title.line, title["directive_line"] = self.lineno, True
            box += title
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, box)
        return [box]


def _role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
          options: Any = None, content: Any = None) -> tuple[list[nodes.Node], list[Any]]:
    shown = role_text(name, text)
    node: nodes.Node = nodes.literal(rawtext, shown) if code_role(name) else nodes.Text(shown)
    return [node], []


def code_role(name: str) -> bool:
    return name.lower().rsplit(":", 1)[-1] in _CODE_ROLES


def role_text(name: str, text: str) -> str:
    """What Sphinx shows for ``:name:`text```: a title before ``<target>``, the last part
    of a ``~``-prefixed name, the target otherwise."""
    explicit = re.fullmatch(r"(?s)(.*?)\s*<([^<>]*)>", text)
    if explicit and explicit[1].strip():
        return " ".join(explicit[1].split())
    target = explicit[2] if explicit else text
    target = target.lstrip("!")
    if name.lower().rsplit(":", 1)[-1] == "doc":
        target = target.strip("/")
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return " ".join(target.split())


def tolerate(text: str) -> None:
    """Register every directive and role ``text`` uses that docutils does not know."""
    for name in set(_DIRECTIVE.findall(text)):
        if name.lower() not in _known_directives():
            directives.register_directive(name, SphinxDirective)
    for name in set(_ROLE.findall(text)):
        if name.lower() not in _known_roles():
            roles.register_local_role(name, _role)


def _known_directives() -> set[str]:
    from docutils.parsers.rst.languages import en

    return {*en.directives, *getattr(directives, "_directive_registry", ()),
            *getattr(directives, "_directives", ())}


def _known_roles() -> set[str]:
    from docutils.parsers.rst.languages import en

    return {*en.roles, *getattr(roles, "_role_registry", ()), *getattr(roles, "_roles", ())}


roles.register_local_role("ref", _role)  # Sphinx's cross-references show their text
roles.register_local_role("doc", _role)
# Sphinx's code directives take options docutils' ``code`` does not (:caption:,
# :emphasize-lines:, :linenos:); read as code whatever options they carry.
for _name in ("code-block", "sourcecode", "code"):
    directives.register_directive(_name, SphinxDirective)

