"""Quotable units of a chunk's Markdown: blocks (prose, list items, table rows, code),
each with the chunk lines it came from. rag.reader.prose splits them into sentences; what a
sentence ending in ":" brings with it is rag.answer.quoting's part.

Never quotable: docs-generator markup and lines of images only (see :func:`is_markup_line`;
a shared markup module may replace it), paragraphs that carry evidence-block markup or address the
assistant (how a document tries to forge evidence or give orders; the delimiters and the
label check are the guarantees), fragments and sentences cut short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rag.reader.code_tail import code_continuation
from rag.reader.fences import (
    hidden_code_lines,
    is_include,
    is_session_fence,
    myst_admonitions,
    session_line,
)
from rag.reader.inline import clean_inline, show_links, show_shortcodes, table_cells
from rag.reader.markdown import outline
from rag.reader.markup import (
    CODE_SPAN,
    VERSION_SHORTCODE,
    is_anchor_line,
    is_template_line,
    marker_words,
    version_marker,
    without_comments,
)

# One line of a command's option list, as CLI generators print it: an option, then two or
# more spaces, then what it does ("  -D, --buildDrafts   include content marked as draft").
_OPTION = re.compile(r"^\s*(?:-\w,\s+)?--?[\w][\w.-]*(?:[ =][\w<>\[\]|.-]+)?\s{2,}\S")
MIN_OPTIONS = 3
BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")  # a list item's marker
_HTML_HEADING = re.compile(r"(?i)<h[1-6]\b[^>]*>.*</h[1-6]>")
# Lines that are docs-generator markup, not content: admonition and tab markers (/// note,
# !!! tip, === "pip", ::: info), Hugo shortcodes, link definitions, bare HTML tags (and, as
# rag.reader.markup says, cross-reference anchors, block attributes, MDC markers, Liquid tags and
# file includes).
_MARKUP_LINE = re.compile(
    r"^(?:/{3,}.*|[!?]{3}.*|={3}[!+]?\s+\".*|:{3,}.*"
    r"|\{\{[<%].*[%>]\}\}|\[[^\]]+\]:\s*\S+.*"
    r"|(?:</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>\s*)+)$"
)
# A line of images only: a figure, or a row of badges ("[![CI](ci.svg)](ci-url)"), with its
# attribute list ("{ width=\"500\" }") or a trailing <br>. The page shows pictures there, not
# text, as it does for an <img> tag alone (a bare HTML tag above).
_IMAGE_LINE = re.compile(r"(?:\[?!\[[^\]\n]*\](?:\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"]*\")?\)"
                         r"|\[[^\]\n]*\])(?:\]\([^()\s]*\))?(?:\{[^{}\n]*\})?(?:<br\s*/?>)?\s*)+")
_INLINE_SHORTCODE = re.compile(r"\{\{[<%]|[%>]\}\}")
# Blockquote markers ("> ", "> > ") and GitHub/Hugo alert markers ("[!NOTE]") show no text.
_QUOTE_PREFIX = re.compile(r"^[ \t]{0,3}>(?:[ \t]?>)*[ \t]?")
_ALERT = re.compile(r"^\[![A-Za-z]+\][+-]?[ \t]*")
# Paragraphs that carry evidence-block markup or speak to the assistant are never quoted.
_MARKUP = re.compile(r"(?i)^(?:evidence\s+e\d+\b|(?:source|lines|heading|content)\s*:)"
                     r"|<\s*/?\s*untrusted")
_ADDRESSED = re.compile(
    r"(?i)\b(?:ignore\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|earlier|above)\s+"
    r"instructions|you\s+are\s+(?:now\s+)?an?\s+(?:helpful\s+)?(?:ai\s+)?assistant|"
    r"from\s+now\s+on,?\s+you|system\s+(?:note|prompt)|do\s+not\s+mention|cite\s+e\d+)\b"
)
FACT = re.compile(r"\b(?:v?\d+\.\d+(?:\.\d+)?|\d{4}-\d{2}-\d{2})\b")
# A section named by one identifier, flag or command ("## `date_from_datetime_inexact`",
# "### `vite preview`", "## server.port", "## envPrefix", "### --save-dev, -D"), as in
# reference pages: its first sentence ("This error is raised when...") says what the name
# is, and the answer must say the name.
NAME_HEADING = re.compile(r"^(?:`[^`]+`"
                          r"|--?\w[\w-]*(?:,?\s+(?:--?\w[\w-]*|<[^<>]+>))*"  # --save-dev, -D
                          r"|[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+"  # server.port
                          r"|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)*"  # base, envPrefix
                          r"|[a-z0-9]+(?:_[a-z0-9]+)+)$")  # max_tokens
# A list item that names an option and says what it does ("* `--dev (-D)`: Add package as
# development dependency."): an entry of its own, like a definition-list term.
_OPTION_ITEM = re.compile(r"^\s*[-*+]\s+`--?[\w-]+[^`]*`\s*:")
# A short item or paragraph that states one value ("Default: `5173`", "**Type**: `boolean`",
# "Since: 0.110", "Default: **2**"), as option pages give them.
_LABELLED_FACT = re.compile(
    r"^([*_]{0,2})\w[\w ]*(?::\1|\1:)\s+(?:`[^`]+`|\d\S*|([*_]{1,2})[^*_\s][^*_]*\2)$")


def is_labelled_fact(text: str) -> bool:
    """Whether the text states one value under a label ("Default: `5173`")."""
    return bool(_LABELLED_FACT.match(text.strip()))


def is_markup_line(line: str) -> bool:
    """A line that only drives the docs generator (admonition marker, shortcode, include,
    link definition, bare HTML tag) or only shows images: never part of a quote."""
    stripped = line.strip()
    return bool(_MARKUP_LINE.match(stripped)) or is_anchor_line(stripped) \
        or ("![" in stripped and bool(_IMAGE_LINE.fullmatch(stripped))) \
        or is_template_line(stripped) or is_include(stripped)


def _unquote(line: str) -> str:
    """A line without its blockquote markers and a leading alert marker ("[!NOTE]")."""
    if ">" not in line[:4] or not _QUOTE_PREFIX.match(line):
        return line
    rest = _QUOTE_PREFIX.sub("", line, count=1)
    return _ALERT.sub("", rest, count=1)


def _unquoted(lines: list[str]) -> list[str]:
    """The lines without blockquote markers, except inside a code block outside a
    blockquote: there ">>> x" is a Python prompt, not a quote."""
    if not any(">" in line[:4] and _QUOTE_PREFIX.match(line) for line in lines):
        return lines
    code = {k for block in outline(lines).code if not block.quoted
            for k in range(block.first, block.last + 1)}
    return [line if k in code else _unquote(line) for k, line in enumerate(lines)]


@dataclass(frozen=True)
class Block:
    """A unit of a chunk: kind is prose, item, row or code; lines are 0-based in the chunk."""

    kind: str
    first: int
    last: int
    lines: tuple[str, ...]
    heading: str  # the path of headings above it inside the chunk
    heading_line: int = -1  # 0-based chunk line of the nearest one; -1 when none
    entry: bool = False  # a definition-list entry (a term line, then ": definition" lines)
    # or one option of a command's option list: a quote of it ends with it
    group: int = -1  # the entry's first line; blocks indented under an entry share it
    header: tuple[str, ...] = ()  # a table row's column names, when its table has a header


def _option_rows(raw: Sequence[str]) -> set[int]:
    """Lines of a command's option list: runs of at least MIN_OPTIONS option lines (blank
    lines between them allowed), wherever the chunk that holds them starts."""
    rows: set[int] = set()
    run: list[int] = []
    for k, line in enumerate([*raw, "end"]):
        if _OPTION.match(line) and quotable((line,)):
            run.append(k)
        elif line.strip():
            if len(run) >= MIN_OPTIONS:
                rows.update(run)
            run = []
    return rows


def _dedent(lines: tuple[str, ...]) -> tuple[str, ...]:
    """Code lines without the indent they all share (a block inside a tab or admonition)."""
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return tuple(x[indent:] for x in lines) if indent else lines


def quotable(lines: Sequence[str], code: bool = False) -> bool:
    """Whether lines may be quoted: no evidence-block markup, no words addressed to the
    assistant, no shortcode or hidden comment (how a document tries to forge evidence)."""
    text = " ".join(lines)
    return not any(_MARKUP.search(line.strip()) for line in lines) and not _ADDRESSED.search(
        text) and not _INLINE_SHORTCODE.search(text) and (
        code or "<!--" not in CODE_SPAN.sub("", text))  # a hidden comment, not `<!-- x -->`


def read_blocks(text: str, first_line_is_file_start: bool = False) -> list[Block]:
    """Blocks of a chunk's Markdown in order; markup lines and headings are not blocks."""
    raw = [show_shortcodes(line) for line in _unquoted(text.split("\n"))]
    if "{" in text:  # MyST admonition fences: their content is prose, not code
        for k, text_shown in myst_admonitions(raw).items():
            raw[k] = text_shown
    blocks: list[Block] = []
    stack: list[tuple[int, str, int]] = []  # (level, text, line) of the open headings
    heading, heading_line = "", -1
    i = 0
    if first_line_is_file_start and raw and raw[0].strip() == "---":  # front matter
        end = next((j for j in range(1, len(raw)) if raw[j].strip() == "---"), None)
        i = end + 1 if end is not None else len(raw)
    in_code = 0 if first_line_is_file_start else code_continuation(raw)  # a split block's tail
    parsed = outline(raw, start=max(i, in_code))
    headings = {h.line: h for h in parsed.headings}
    code = {c.first: c for c in parsed.code}
    items, rows = parsed.items, parsed.rows  # list items' text, tables' lines
    current: list[int] = []
    header: tuple[str, ...] = ()  # column names of the table being read

    group = -1  # first line of the definition-list entry that indented blocks continue

    def in_entry(first: int) -> int:
        """The entry a block starting on line ``first`` continues (indented under it), or -1;
        a block at the margin ends the entry."""
        nonlocal group
        if group >= 0 and not raw[first][:1].isspace():
            group = -1
        return group

    def flush(kind: str = "prose") -> None:
        nonlocal group
        if current:
            lines = tuple(raw[j].strip() for j in current)
            entry = kind == "prose" and len(lines) > 1 and not lines[0].startswith(":") \
                and lines[1].startswith(": ")
            if entry:
                group = current[0]
            owner = group if entry else in_entry(current[0])
            joined = " ".join(lines)
            if "<!--" in joined and "<!--" in CODE_SPAN.sub("", joined) \
                    and not _ADDRESSED.search(joined):  # a comment in it hides only itself
                shown = without_comments(lines)
                lines = shown if shown and any(shown) else lines
            if quotable(lines):
                blocks.append(Block(kind, current[0], current[-1], lines, heading, heading_line,
                                    owner >= 0, owner,
                                    header if kind == "row" else ()))
            current.clear()

    option_rows = _option_rows(raw)
    while i < len(raw):
        line = raw[i].strip()
        if i in option_rows and i not in code:  # a chunk can start inside the list
            flush()
            blocks.append(Block("item", i, i, (" ".join(line.split()),), heading,
                                heading_line, entry=True, group=i))
            i += 1
            continue
        if i < in_code or i in parsed.comments:  # the rest of a code block opened in an
            flush()                               # earlier chunk, or hidden: not prose
            i += 1
            continue
        # A row outside a table the parser found: a piece of one whose header an earlier
        # chunk holds.
        row = rows.get(i) or ("" if not line.startswith("|") else "delimiter" if all(
            set(c) <= set(":- ") for c in table_cells(line)) else "row")
        if header and not row:
            header = ()  # a table ends at the first line that is not one of its rows
        marker = version_marker(line)
        if marker and not is_markup_line(line):  # inside a line it reads as its words
            raw[i] = VERSION_SHORTCODE.sub(marker_words, raw[i])
            line = raw[i].strip()
        block = code.get(i)
        if block is not None:
            flush()
            # Code is quoted as written (an HTML template keeps its tags); only a terminal
            # session is shown without the tags that colour it.
            shown = session_line if is_session_fence(line) else str
            inside = block.body
            hidden = hidden_code_lines([raw[k] for k in inside])  # includes, twoslash setup
            body = _dedent(tuple("" if n in hidden else shown(raw[k]).rstrip()
                                 for n, k in enumerate(inside)))
            options = [k for k in inside if k in option_rows]
            if options and len(options) * 2 > sum(map(bool, body)):
                # A command's option list ("  -D, --buildDrafts   include drafts"): each
                # option is quotable on its own, like a list item.
                blocks.extend(Block("item", k, k, (" ".join(raw[k].split()),), heading,
                                    heading_line, entry=True, group=k)
                              for k in options if quotable((raw[k],)))
            elif any(b.strip() for b in body) and quotable(body, code=True):
                owner = in_entry(i)
                blocks.append(Block("code", i, block.last, body, heading, heading_line,
                                    owner >= 0, owner))
            i = block.last + 1
            continue
        found = headings.get(i)
        if _MARKUP.search(line):
            current.append(i)  # evidence markup: the whole paragraph it sits in is dropped
        elif found:
            flush()
            group = -1
            stack = [h for h in stack if h[0] < found.level] + [(found.level, found.name, i)]
            heading, heading_line = " > ".join(h[1] for h in stack), i
            i = found.end + 1  # a setext heading's underline is part of it
            continue
        elif is_include(line):
            # The page shows a file's code here ("{* ../docs_src/app.py hl[3] *}"): quoted,
            # the line that names the file stands for it, as code.
            flush()
            owner = in_entry(i)
            blocks.append(Block("code", i, i, (line,), heading, heading_line, owner >= 0, owner))
        elif not line or set(line) <= set("-=*_ ") or is_markup_line(line):
            flush()
        elif row:
            flush()
            if row == "header":
                header = tuple(show_links(clean_inline(c)) for c in table_cells(line))
            elif row == "row":  # (a header names the columns; it states no fact)
                current.append(i)
                flush("row")
            i += 1
            continue
        elif i in items:
            flush()
            j = items[i] + 1  # the item's text, lazy continuation lines included
            current.extend(k for k in range(i, j) if not is_markup_line(raw[k]))
            flush("item")
            if _OPTION_ITEM.match(line) and blocks and blocks[-1].first == i:
                blocks[-1] = replace(blocks[-1], entry=True, group=i)
            i = j
            continue
        elif _HTML_HEADING.fullmatch(line):  # a note's "<h5>Title</h5>": not the first
            flush()                           # words of the paragraph below it
            current.append(i)
            flush()
        else:
            current.append(i)
        i += 1
    flush()
    return blocks

