"""HTML on lxml: headings, paragraphs, list items, table rows and ``pre`` blocks, at the
lines their text is written on.

lxml (libxml2's HTML parser, forgiving of real-world markup) gives each element the line
its start tag is on; a block's text is followed through its text and children, counting
line breaks, so each line of a paragraph shows the words written on that line.

Left out: scripts, styles, templates, forms, embedded objects, and navigation chrome
(``nav``, ``header``, ``footer``, ``aside``, and ARIA navigation, banner, search and
contentinfo landmarks). When the page marks its main content (``main``, ``article`` or
``role="main"``), only that is read.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from rag.reader.formats.base import (
    CODE,
    HEADING,
    ITEM,
    PARAGRAPH,
    ROW,
    FileBlock,
    Reader,
    UnreadableFile,
)

_CHROME = frozenset({"script", "style", "noscript", "template", "nav", "header", "footer",
                     "aside", "form", "button", "select", "svg", "iframe", "object", "canvas",
                     "head", "title", "meta", "link"})
_CHROME_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "menu", "menubar"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_PROSE = frozenset({"p", "dt", "dd", "figcaption", "caption", "summary", "address"})
_BLOCKS = frozenset({*_HEADINGS, *_PROSE, "pre", "li", "table", "ul", "ol", "dl", "div",
                     "section", "article", "main", "blockquote", "figure", "details", "tr",
                     "hr", "br"} | {"body"})
_SPACES = re.compile(r"\s+")
_TAG = re.compile(r"<[^<>]*>")


class HtmlReader(Reader):
    """``.html`` and ``.htm`` pages."""

    name = "html"

    def blocks(self, lines: list[str], path: str) -> list[FileBlock]:
        from lxml import etree, html

        text = "\n".join(lines)
        if not text.strip():
            return []
        try:
            # No network and no entities from outside: a page is read as it is.
            parser = html.HTMLParser(no_network=True, huge_tree=True)
            root = html.document_fromstring(text, parser=parser)
        except (etree.ParserError, ValueError) as exc:
            raise UnreadableFile(f"not readable as HTML ({exc})") from None
        main = root.xpath("//main | //*[@role='main'] | //article")
        walk = _Walk(lines)
        for element in main[:1] or [root]:
            walk.visit(element)
        return walk.out


def _chrome(element: Any) -> bool:
    tag = element.tag if isinstance(element.tag, str) else ""
    return tag.lower() in _CHROME or (element.get("role") or "").lower() in _CHROME_ROLES \
        or element.get("hidden") is not None or element.get("aria-hidden") == "true"


class _Walk:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.out: list[FileBlock] = []
        self.path: list[tuple[int, str]] = []  # (level, name) of the open headings
        self.placed: dict[int, int] = {}  # line -> column past the last heading placed in it
        self.lowered: dict[int, str] = {}  # line -> its text in lower case (once per line)

    def visit(self, element: Any) -> None:
        if not isinstance(element.tag, str) or _chrome(element):
            return
        tag = element.tag.lower()
        if tag in _HEADINGS:
            self.heading(element, _HEADINGS[tag])
        elif tag == "pre":
            self.code(element)
        elif tag == "table":
            self.table(element)
        elif tag in _PROSE or tag == "li" or not any(
                isinstance(c.tag, str) and c.tag.lower() in _BLOCKS for c in element):
            self.prose(element, ITEM if tag == "li" else PARAGRAPH)
        else:
            self.loose_text(element)
            for child in element:
                self.visit(child)

    def names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.path)

    def heading(self, element: Any, level: int) -> None:
        placed = _line_texts(element)
        name = " ".join(" ".join(placed.values()).split())
        if not placed or not name:
            return
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, name))
        first, last = min(placed), max(placed)
        self.out.append(FileBlock(HEADING, first, last, (name,), self.names(), level,
                                  column=self.column(element, name)))

    def column(self, element: Any, name: str) -> int | None:
        """Where the heading's start tag is in its line: the next ``<hN>`` there, past the
        headings already placed, whose text reads as the name (a heading in left-out
        chrome is passed over). A minified page holds many headings in one line."""
        line = (element.sourceline or 0) - 1
        if not 0 <= line < len(self.lines):
            return None
        text = self.lines[line]
        lowered = self.lowered.setdefault(line, text.lower())
        tag = re.compile(rf"<{element.tag}\b[^<>]*>", re.IGNORECASE)
        for found in tag.finditer(text, self.placed.get(line, 0)):
            close = lowered.find(f"</{element.tag.lower()}", found.end())
            inner = text[found.end():close if close >= 0 else len(text)]
            if " ".join(unescape(_TAG.sub(" ", inner)).split()) == name:
                self.placed[line] = found.end()
                return found.start()
        return None

    def prose(self, element: Any, kind: str) -> None:
        nested = [c for c in element if isinstance(c.tag, str)
                  and c.tag.lower() in ("ul", "ol", "dl", "table", "pre", "p", "div")]
        placed = _line_texts(element, skip=set(nested))
        self.add(kind, placed)
        for child in nested:
            self.visit(child)

    def loose_text(self, element: Any) -> None:
        """Text written straight inside a container, between its blocks."""
        placed = _line_texts(element, skip={c for c in element if isinstance(c.tag, str)
                                            and c.tag.lower() in _BLOCKS})
        self.add(PARAGRAPH, placed)

    def add(self, kind: str, placed: dict[int, str]) -> None:
        placed = {k: v for k, v in placed.items() if v}
        if not placed:
            return
        first, last = min(placed), max(placed)
        shown = tuple(placed.get(n, "") for n in range(first, last + 1))
        self.out.append(FileBlock(kind, first, last, shown, self.names()))

    def code(self, element: Any) -> None:
        start = element.sourceline or 1
        text = element.text_content()
        body = text.removeprefix("\n")  # a break right after <pre> is not part of the code
        if text != body:
            start += 1
        code = body.rstrip("\n").split("\n")
        if not any(line.strip() for line in code):
            return
        end = min(start + len(code) - 1, len(self.lines))
        self.out.append(FileBlock(CODE, start, end, tuple(code), self.names()))

    def table(self, element: Any) -> None:
        header: tuple[str, ...] = ()
        for row in element.iter("tr"):
            cells = [c for c in row if isinstance(c.tag, str) and c.tag.lower() in ("td", "th")]
            texts = [" ".join(c.text_content().split()) for c in cells]
            if not cells or not any(texts):
                continue
            if all(c.tag.lower() == "th" for c in cells) and not header:
                header = tuple(texts)
                continue
            line = row.sourceline or cells[0].sourceline or 1
            self.out.append(FileBlock(ROW, line, line, ("| " + " | ".join(texts) + " |",),
                                      self.names(), header=header))


def _line_texts(element: Any, skip: set[Any] | None = None) -> dict[int, str]:
    """The element's text by the file line it is written on (1-based), chrome and the
    ``skip`` children left out; lines joined by spaces within a line."""
    placed: dict[int, list[str]] = {}

    def put(text: str | None, line: int, keep: bool) -> int:
        if not text:
            return line
        for k, piece in enumerate(text.split("\n")):
            words = _SPACES.sub(" ", piece).strip()
            if words and keep:
                placed.setdefault(line + k, []).append(words)
        return line + text.count("\n")

    def walk(node: Any, line: int, keep: bool) -> int:
        """The line the node's text ends on; its words recorded when ``keep``."""
        line = put(node.text, node.sourceline or line, keep)
        for child in node:
            if isinstance(child.tag, str):  # left-out children still take up lines
                shown = keep and not _chrome(child) and child not in (skip or ())
                line = walk(child, max(line, child.sourceline or line), shown)
            else:  # a comment or processing instruction: lines, no text
                line += (child.text or "").count("\n")
            line = put(child.tail, line, keep)
        return line

    walk(element, element.sourceline or 1, True)
    return {n: " ".join(parts) for n, parts in sorted(placed.items())}
