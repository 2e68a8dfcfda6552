"""Markdown's block structure as markdown-it-py reads it: the one heading rule and the one
fence rule of the code base.

:func:`outline` parses a file's (or a chunk's) lines and says where the headings (ATX and
setext) and the code blocks (fenced, at any depth) lie, in the numbering of the lines as
given: a line of the input is a line of the outline, whatever it holds (a lone ``"\r"``,
which the parser would break a line on, is read as a blank). :func:`fence_run` and
:func:`atx_heading` ask the same parser about a single line, for the few places that must
judge a line without its document (a chunk that starts inside a code block, an answer's
quoted code).

The parser is CommonMark with GFM tables and mdit-py-plugins' colon fences (MyST's
``:::{note}``, Docusaurus' ``:::tip``: boxes of Markdown, read inside), plus MkDocs
admonitions (``!!! note``, ``??? tip``) and content tabs (``=== "pip"``), whose bodies are
Markdown indented by four spaces, as Python-Markdown reads them: a fence or a heading
inside one is a fence or a heading.

Rules on top of the parser: a setext underline under a paragraph of more than
``SETEXT_MAX_LINES`` lines makes no heading (a heading is not a page); a heading inside a
block quote is text of the quote, not one of the page's sections; and an indented code
block is text whose fences still open code (see :func:`outline`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import unescapeAll
from markdown_it.rules_block import StateBlock
from mdit_py_plugins.colon_fence import colon_fence_plugin

SETEXT_MAX_LINES = 4
MAX_HEADING_CHARS = 200
# An inline code span, `x` or ``x``: a whole run of backticks opens it and a run of the same
# length closes it, so no start inside a run is tried (a line of backticks stays linear).
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.*?[^`])\1(?!`)")
_ATTRIBUTES = re.compile(r"\{[ \t]*(?:[#.][^{}]*|/\*[^{}]*\*/[ \t]*)\}")  # {#id}, MDX {/*id*/}
# MyST directives whose content is Markdown a reader sees in a box (rag.reader.fences shows
# their fence lines): written as a fence (```{note}), they hold prose, not code.
MYST_ADMONITIONS = ("attention", "caution", "danger", "error", "hint", "important", "note",
                    "seealso", "tip", "warning", "admonition", "dropdown", "topic", "sidebar",
                    "margin", "versionadded", "versionchanged", "versionremoved", "deprecated")
MYST_BOX = re.compile(r"\{(?:" + "|".join(MYST_ADMONITIONS) + r")\}")
# An admonition's or a collapsible block's marker and type ("!!! note", '???+ tip "Title"'),
# or a content tab's marker and title ('=== "pip"').
_BOX = re.compile(r"(?:(?:!!!|\?\?\?\+?)[ \t]+[\w-]+(?:[ \t]+[\w-]+)*(?:[ \t]+\"[^\"\n]*\")?"
                  r"|={3}[!+]?[ \t]+\"[^\"\n]*\")[ \t]*")


@dataclass(frozen=True)
class Heading:
    line: int  # 0-based, the heading's first line (a setext heading's text)
    end: int  # 0-based, its last line (a setext heading's underline)
    level: int
    name: str


@dataclass(frozen=True)
class Code:
    """A code block: ``first``..``last`` (0-based, inclusive) hold it, fence lines included."""

    first: int
    last: int
    fence: str  # the opening fence's run ("```", "~~~~")
    info: str  # the opening fence's info string ("python", "{note}")
    closed: bool  # a closing fence ends it (its last line)
    quoted: bool  # inside a block quote

    @property
    def body(self) -> range:
        """The lines of its content, without the fence lines."""
        return range(self.first + 1, self.last + (0 if self.closed else 1))


@dataclass(frozen=True)
class Outline:
    headings: list[Heading]
    code: list[Code]
    boxes: list[Code] = field(default_factory=list)  # MyST admonitions (```{note} ... ```)
    # A list item's opening paragraph: its first line -> its last (0-based, inclusive).
    items: dict[int, int] = field(default_factory=dict)
    # A table's lines: "header", "delimiter" or "row".
    rows: dict[int, str] = field(default_factory=dict)
    comments: set[int] = field(default_factory=set)  # lines of HTML comments: never shown

    def in_code(self, count: int) -> list[bool]:
        """For each of ``count`` lines: does it lie in a code block (fences included)?"""
        flags = [False] * count
        for block in self.code:
            for i in range(block.first, min(block.last, count - 1) + 1):
                flags[i] = True
        return flags


def cap(name: str) -> str:
    """A name cut to ``MAX_HEADING_CHARS``, ending in "…" when cut."""
    return name if len(name) <= MAX_HEADING_CHARS else name[: MAX_HEADING_CHARS - 1] + "…"


def heading_name(raw: str) -> str:
    """Heading text without blanks around it and without a trailing ``{ #id }`` block (or
    the ``{/*id*/}`` comment that MDX docs such as React's give a heading its id with)."""
    name = raw.strip()
    brace = name.rfind("{") if name.endswith("}") else -1
    if brace >= 0 and _ATTRIBUTES.fullmatch(name, brace):
        name = name[:brace].strip()
    return cap(shown_name(name))


def shown_name(name: str) -> str:
    """A heading's name as the page shows it: entities and backslash escapes read
    (``--filter &lt;glob&gt;`` is "--filter <glob>"), code spans as they are written."""
    if "&" not in name and "\\" not in name:
        return name
    out, at = [], 0
    for span in CODE_SPAN.finditer(name):
        out += [unescapeAll(name[at:span.start()]), span[0]]
        at = span.end()
    return "".join([*out, unescapeAll(name[at:])])


def _indented_box(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """An MkDocs admonition (``!!! note``, ``??? tip``) or content tab (``=== "pip"``) and
    the lines indented four under it, read as Markdown, as Python-Markdown reads them:
    blank lines, any number of them, do not end it; a line indented less does."""
    if state.is_code_block(start):
        return False
    begin, stop = state.bMarks[start] + state.tShift[start], state.eMarks[start]
    if state.src[begin:begin + 3] not in ("!!!", "???", "===") \
            or not _BOX.fullmatch(state.src, begin, stop):
        return False
    if silent:
        return True
    saved = state.parentType, state.lineMax, state.blkIndent
    indent = state.sCount[start] + 4
    line = last = start + 1
    while line < end:
        if state.bMarks[line] + state.tShift[line] < state.eMarks[line]:  # not blank
            if state.sCount[line] < indent:
                break
            last = line + 1
        line += 1
    state.parentType, state.blkIndent, state.lineMax = "box", indent, last  # type: ignore[assignment]
    token = state.push("box_open", "div", 1)
    token.map, token.markup = [start, last], state.src[begin:begin + 3]
    state.md.block.tokenize(state, start + 1, last)
    state.push("box_close", "div", -1)
    state.parentType, state.lineMax, state.blkIndent = saved
    state.line = last
    return True


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable("table").use(colon_fence_plugin)
    md.block.ruler.before("fence", "indented_box", _indented_box,
                          {"alt": ["paragraph", "reference", "blockquote", "list"]})
    md.disable("inline")  # block structure only; a heading's name is its inline's source
    return md


_PARSER = _parser()


def _tokens(lines: list[str]) -> tuple[Any, ...]:
    # The parser breaks lines on "\r" too; read as a blank, it keeps the numbering as given.
    return _parse("\n".join(line.replace("\r", " ") if "\r" in line else line
                            for line in lines))


@lru_cache(maxsize=8)
def _parse(src: str) -> tuple[Any, ...]:
    """The block tokens of src. A file's body is read twice as it is chunked (its sections,
    then what each line shows), and the tokens are only read, so the second read reuses them."""
    return tuple(_PARSER.parse(src))


def _at_margin(lines: list[str]) -> list[str]:
    """The lines without the indent they all share (blank lines aside)."""
    margin = min((len(x) - len(x.lstrip(" ")) for x in lines if x.strip()), default=0)
    return [x[margin:] for x in lines] if margin else lines


def outline(lines: list[str], *, start: int = 0) -> Outline:
    """Where the headings and code blocks of ``lines[start:]`` lie (0-based line numbers
    of ``lines``); lines before ``start`` (front matter, the tail of a code block an earlier
    chunk opened) are not read.

    Lines that all share an indent are read at its margin, and an indented code block is
    read as text whose fences still open code: a chunk read on its own has lost the list
    item or admonition its indented lines belong to, and docs dialects disagree on indented
    code (MDX has none; kramdown reads an HTML block to its closing tag).
    """
    found = Outline([], [], [])
    _read(_at_margin(lines[start:] if start else lines), start, 0, found)
    return found


def _read(lines: list[str], offset: int, quotes: int, found: Outline,
          headings: bool = True) -> None:
    """Headings (unless not ``headings``), code, MyST boxes, list items and table lines of
    ``lines`` into ``found``, numbered from ``offset``; ``quotes`` counts the block quotes
    open around them."""
    tokens = _tokens(lines)
    code, boxes = found.code, found.boxes
    for k, token in enumerate(tokens):
        kind = token.type
        if kind == "blockquote_open":
            quotes += 1
        elif kind == "blockquote_close":
            quotes -= 1
        elif kind == "list_item_open" and token.map:
            # The item's text: the paragraph its first line opens ("- > quoted" too).
            j = k + 1
            while j < len(tokens) and (not tokens[j].map or tokens[j].type == "blockquote_open"):
                j += 1
            opening = tokens[j] if j < len(tokens) else None
            if opening is not None and opening.type == "paragraph_open" \
                    and opening.map[0] == token.map[0]:
                found.items[opening.map[0] + offset] = opening.map[1] - 1 + offset
        elif kind == "html_block" and token.map and token.content.lstrip().startswith("<!--"):
            found.comments.update(range(token.map[0] + offset, token.map[1] + offset))
        elif kind == "tr_open" and token.map:
            row = "header" if tokens[k - 1].type == "thead_open" else "row"
            found.rows[token.map[0] + offset] = row
            if row == "header":
                found.rows[token.map[1] + offset] = "delimiter"
        elif kind == "heading_open" and headings and not quotes and token.map:
            first, stop = token.map
            setext = token.markup in ("=", "-")
            if setext and stop - first - 1 > SETEXT_MAX_LINES:
                continue
            text = tokens[k + 1].content
            name = " ".join(part.strip() for part in text.split("\n")) if setext else text
            found.headings.append(Heading(first + offset, stop - 1 + offset,
                                          int(token.tag[1]), heading_name(name)))
        elif kind == "code_block" and token.map:  # text, as said above; headings stay text
            first, stop = token.map
            inside = _at_margin(lines[first:stop])
            if inside != lines[first:stop]:  # (indented by tabs, it holds no fence)
                _read(inside, offset + first, quotes, found, headings=False)
        elif kind in ("fence", "colon_fence") and token.map:
            first, stop = token.map
            # The content's lines; one more in the map is the closing fence.
            body = token.content.count("\n") + (not token.content.endswith("\n"))
            closed = stop - first - 1 > body
            info = token.info.strip()
            if kind == "colon_fence" or MYST_BOX.match(info):  # a box of prose: read inside
                if MYST_BOX.match(info):
                    boxes.append(Code(first + offset, stop - 1 + offset, token.markup, info,
                                      closed, quotes > 0))
                _read(lines[first + 1:first + 1 + body], offset + first + 1, quotes, found,
                      headings)
                continue
            code.append(Code(first + offset, stop - 1 + offset, token.markup, info, closed,
                             quotes > 0))


@lru_cache(maxsize=4096)
def _alone(line: str) -> tuple[str, str, int, str]:
    """(type, markup, level, name) of the first block a line read alone makes."""
    tokens = _PARSER.parse(line.replace("\r", " "))  # (its own cache, not _parse's)
    if not tokens:
        return "", "", 0, ""
    first = tokens[0]
    if first.type == "heading_open":
        return "heading", first.markup, int(first.tag[1]), heading_name(tokens[1].content)
    return first.type, first.markup, 0, ""


def fence_run(line: str) -> str:
    """The backtick or tilde run of a line that opens (or closes) a fence, up to three
    spaces in (``"```"`` for ```` ```python ````), or ""."""
    stripped = line.lstrip(" ")
    if stripped[:1] not in ("`", "~") or len(line) - len(stripped) > 3:
        return ""
    kind, markup, _, _ = _alone(line)
    return markup if kind == "fence" else ""


def atx_heading(line: str) -> tuple[int, str] | None:
    """(level, name) of a line that is an ATX heading read alone (``## Name {#id} ##``)."""
    if "#" not in line[:4]:
        return None
    kind, _, level, name = _alone(line)
    return (level, name) if kind == "heading" else None
