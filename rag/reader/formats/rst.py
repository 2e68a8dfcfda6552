"""reStructuredText on docutils: section titles, paragraphs, list items, table rows and code,
each at the lines it is written on.

docutils parses the file (Sphinx's additions read as text: :mod:`rag.reader.formats.sphinx`);
its nodes give each block's kind, order and the line docutils reports, and each is then
found in the file: a block's first source line must hold its first line of text, at or
after the previous block, near the reported line when there is one. A block found nowhere
is left out rather than cited at a wrong line. Its shown text is read line by line from
the file with inline markup as a reader sees it (roles as their text, ````code```` as
```code```, link targets and the ``_`` of a named reference left out), so a quoted sentence
keeps its exact lines.

No parser message reaches the user: reports are off, files are never included (``..
include::`` and ``.. raw::`` read nothing from elsewhere), and no docutils.conf is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from rag.reader.formats.base import CODE, HEADING, ITEM, PARAGRAPH, ROW, FileBlock, Reader
from rag.reader.formats.sphinx import code_role, role_text, tolerate
from rag.reader.inline import outside_code

_OVERRIDES = {"report_level": 5, "halt_level": 5, "warning_stream": False,
              "file_insertion_enabled": False, "raw_enabled": False, "_disable_config": True,
              "syntax_highlight": "none", "smart_quotes": False, "line_length_limit": 100_000,
              "character_level_inline_markup": False, "pep_references": False,
              "rfc_references": False, "input_encoding": "unicode"}
_SKIP = (nodes.system_message, nodes.comment, nodes.target, nodes.substitution_definition,
         nodes.raw, nodes.pending, nodes.transition)
_NEAR = 3  # how far from the line docutils reports a block's first line is looked for

_ROLE = re.compile(r":([\w][\w:.+-]*):`([^`]*)`")
_LITERAL = re.compile(r"``(.+?)``")
_LINK = re.compile(r"`([^`<]*?)\s*<[^<>`]*>`__?")
_REFERENCE = re.compile(r"`([^`]+)`__?(?![\w])")
# A simple reference name: a word (inner hyphens, dots, underscores, pluses) then "_" or "__".
_NAMED_REFERENCE = re.compile(r"(?<![\w`*./:-])([A-Za-z0-9](?:[\w.+-]*[A-Za-z0-9])?)__?(?![\w`/])")
_SUBSTITUTION = re.compile(r"\|([^|\s][^|]*)\|(?:__?)?")
_ESCAPE = re.compile(r"\\(.)")
_MARKER = re.compile(r"^\s*(?:[-*+\u2022]|\(?(?:\d+|[a-zA-Z]|#)[.)])\s+")
_SPACES = re.compile(r"\s+")


def clean_line(line: str) -> str:
    """One source line with its inline markup as a reader sees it (see the docstring)."""
    text = line.strip()
    if text.endswith("::"):
        text = text[:-2].rstrip() + (":" if not text[:-2].endswith(" ") else "")
    if ":" in text:
        text = _ROLE.sub(lambda m: _role(m[1], m[2]), text)
    if "`" in text:
        text = _LITERAL.sub(lambda m: f"`{m[1]}`", text)
        text = _LINK.sub(lambda m: m[1], text)
        text = _REFERENCE.sub(lambda m: m[1], text)
    if "_" in text:  # "such as Dynaconf_," (a named reference) reads "such as Dynaconf,"
        text = outside_code(text, lambda prose: _NAMED_REFERENCE.sub(r"\1", prose))
    if "|" in text:
        text = _SUBSTITUTION.sub(lambda m: m[1], text)
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


def _role(name: str, text: str) -> str:
    shown = role_text(name, text)
    return f"`{shown}`" if code_role(name) else shown


class _Finder:
    """Finds each block's lines in the file, in document order."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.flat = [_SPACES.sub(" ", line).strip() for line in lines]
        self.cursor = 0  # 0-based: blocks after this line only

    def find(self, text: str, hint: int | None) -> int | None:
        """0-based line at or after the cursor holding ``text`` (first line of a block)."""
        needle = _SPACES.sub(" ", text).strip()
        if not needle:
            return None
        order: Iterator[int] = iter(())
        if hint:
            near = range(max(self.cursor, hint - 1 - _NEAR), min(len(self.lines), hint + _NEAR))
            order = iter(sorted(near, key=lambda i: abs(i - (hint - 1))))
        for i in (*order, *range(self.cursor, len(self.lines))):
            if needle in self.flat[i]:
                return i
        return None

    def span(self, text: str, hint: int | None) -> tuple[int, int] | None:
        """0-based (first, last) lines of a block whose source is ``text``."""
        source = text.split("\n")
        first_at = next((k for k, part in enumerate(source) if part.strip()), None)
        if first_at is None:
            return None
        start = self.find(source[first_at], hint)
        if start is None:
            return None
        end = min(start + len(source) - 1 - first_at, len(self.lines) - 1)
        last = _SPACES.sub(" ", source[-1]).strip()
        while end > start and last and last not in self.flat[end]:
            end -= 1  # a line docutils joined or trimmed: end where the text does
        self.cursor = end + 1
        return start, end


class RstReader(Reader):
    """reStructuredText, Sphinx's included."""

    name = "rst"

    def blocks(self, lines: list[str], path: str) -> list[FileBlock]:
        text = "\n".join(lines)
        tolerate(text)
        settings = get_default_settings(Parser)  # type: ignore[arg-type]
        for key, value in _OVERRIDES.items():
            setattr(settings, key, value)
        document = new_document(path, settings)
        Parser().parse(text, document)
        walk = _Walk(lines)
        walk.visit(document)
        return walk.out


class _Walk:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.find = _Finder(lines)
        self.out: list[FileBlock] = []
        self.path: list[str] = []

    def shown(self, first: int, last: int) -> tuple[str, ...]:
        shown = tuple(clean_line(self.lines[i]) for i in range(first, last + 1))
        # A ``literal`` wrapped onto the next line is left whole by clean_line: its two
        # halves' marks are the only ones left, paired from the top.
        if sum(line.count("``") for line in shown) % 2 == 0 and any("``" in x for x in shown):
            shown = tuple(line.replace("``", "`") for line in shown)
        return shown

    def emit(self, kind: str, node: Any, item: bool = False) -> None:
        if node.get("directive_line") and node.line:  # text the directive line stands for
            line = node.line - 1
            if line >= self.find.cursor and line < len(self.lines):
                self.find.cursor = line + 1
                self.out.append(FileBlock(kind, line + 1, line + 1,  # as a line reads
                                          (clean_line(node.astext()),), tuple(self.path)))
            return
        span = self.find.span(node.rawsource or node.astext(), node.line)
        if span is None:
            return
        first, last = span
        shown = self.shown(first, last)
        if self.lines[first].lstrip().startswith(".. "):  # a directive's title, not its marker
            shown = (" ".join(node.astext().split()),)
            last = first
        if item:
            shown = (_MARKER.sub("", shown[0]), *shown[1:])
        self.out.append(FileBlock(kind, first + 1, last + 1, shown, tuple(self.path)))

    def heading(self, name: str, source: str, hint: int | None, level: int) -> bool:
        name = " ".join(name.split())
        line = self.find.find(source.split("\n")[0], hint) if source else None
        if line is None or not name:
            return False
        self.find.cursor = line + 1
        self.path.append(name)
        self.out.append(FileBlock(HEADING, line + 1, line + 1, (name,), tuple(self.path), level))
        return True

    def visit(self, node: Any, item: bool = False) -> None:
        if isinstance(node, _SKIP):
            return
        if isinstance(node, nodes.section) and node.children \
                and isinstance(node[0], nodes.title):
            title = node[0]
            pushed = self.heading(title.astext(), title.rawsource, title.line, len(self.path) + 1)
            for child in node.children[1:]:
                self.visit(child)
            if pushed:
                self.path.pop()
            return
        if isinstance(node, nodes.container) and "object" in node.attributes:
            pushed = bool(node["object"]) and self.heading(
                node["object"], node["object"], node.line, len(self.path) + 1)
            for child in node.children:
                self.visit(child)
            if pushed:
                self.path.pop()
            return
        if isinstance(node, nodes.paragraph | nodes.rubric | nodes.term | nodes.title
                      | nodes.line):
            self.emit(ITEM if item else PARAGRAPH, node, item)
            return
        if isinstance(node, nodes.literal_block | nodes.doctest_block):
            self.code(node)
            return
        if isinstance(node, nodes.table):
            self.table(node)
            return
        if isinstance(node, nodes.list_item):
            for n, child in enumerate(node.children):
                self.visit(child, item=n == 0 and isinstance(child, nodes.paragraph))
            return
        for child in node.children:
            if isinstance(child, nodes.Element):
                self.visit(child)

    def code(self, node: Any) -> None:
        code = node.astext().split("\n")
        span = self.find.span(node.astext(), None)
        if span is None:
            return
        first, last = span
        self.out.append(FileBlock(CODE, first + 1, last + 1, tuple(code), tuple(self.path)))

    def table(self, node: Any) -> None:
        header: tuple[str, ...] = ()
        for group in node.findall(nodes.thead):
            for row in group.findall(nodes.row):
                header = tuple(" ".join(e.astext().split()) for e in row.findall(nodes.entry))
        for body in node.findall(nodes.tbody):
            for row in body.findall(nodes.row):
                cells = [" ".join(e.astext().split()) for e in row.findall(nodes.entry)]
                first = next((p for p in row.findall(nodes.paragraph)), None)
                line = self.find.find(first.rawsource.split("\n")[0], first.line) \
                    if first is not None else None
                if line is None:
                    continue
                self.find.cursor = line + 1
                self.out.append(FileBlock(ROW, line + 1, line + 1,
                                          ("| " + " | ".join(cells) + " |",), tuple(self.path),
                                          header=header))
