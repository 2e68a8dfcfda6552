"""How inline Markdown reads on the rendered page, for quotes: HTML entities and backslash
escapes as their characters, inline links as their text, inline HTML tags dropped
(``<code>x</code>`` read as a code span), code spans left as they are, and table rows as
cells named by their columns.

Block structure (paragraphs, lists, tables, code) is rag/reader/passages.py's part; docs-generator
markup (shortcodes, admonitions, includes) is rag/reader/markup.py's.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence

from rag.reader.markup import (
    CODE_SPAN,
    HTML_TAG,
    INLINE_COMMENT,
    SHORTCODE_CLOSERS,
    VERSION_SHORTCODE,
)

__all__ = ["clean_inline", "outside_code", "row_text", "show_entities",
           "show_links", "show_shortcodes", "table_cells", "unescape"]

# --- code spans and HTML entities -------------------------------------------------------------

_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")


def outside_code(text: str, change: Callable[[str], str]) -> str:
    """``text`` with ``change`` applied to the prose between its code spans only."""
    out, pos = [], 0
    for span in CODE_SPAN.finditer(text):
        out += [change(text[pos:span.start()]), span.group()]
        pos = span.end()
    out.append(change(text[pos:]))
    return "".join(out)


def show_entities(text: str) -> str:
    """Prose with HTML entities shown as their characters (&nbsp; as a space, &amp; as
    &), as the rendered page shows them; code spans keep theirs, as Markdown does."""
    return outside_code(text, lambda prose: _ENTITY.sub(_entity, prose))


def _entity(match: re.Match[str]) -> str:
    shown = html.unescape(match.group())
    return " " if shown in ("\xa0", "\u2002", "\u2003", "\u2009") else shown


# --- escapes, tags and links ------------------------------------------------------------------

# Inline links show their text: [text](url), [text][ref], [text][] and Hugo's [term](g).
# Its text may hold a code span with brackets: "[`[project.scripts]`](url)"; its target may
# be a Liquid or Jinja expression, or start with one: "[options]({{ '/docs/x/' | relative_url }})",
# "[#1114]({{ site.repository }}/issues/1114)". An image
# ("![logo](logo.png)") keeps its markup.
_INLINE_LINK = re.compile(r"(?<![!\\])\[((?:`[^`\n]*`|[^\[\]\n`])+)\]"
                          r"(?:\((?P<target>[^()\s]*)(?:\s+\"[^\"]*\")?\)|\[[^\[\]\n]*\]"
                          r"|\(\{\{[^{}\n]*\}\}[^()\s]*\)|\(\{%[^{}\n]*%\}[^()\s]*\))")  # ({{ x }}/a)
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a pipe, unless escaped (GFM: "\|" inside a cell)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a Markdown backslash escape


def table_cells(line: str) -> list[str]:
    """The cells of a pipe-table row, stripped ("\\|" in a cell is a pipe)."""
    body = line.strip().removeprefix("|")
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(body)]


def html_code_spans(text: str) -> str:
    """``<code>x</code>`` as the code span it renders as, its escapes and entities read
    (found by plain scanning, so no line can make it slow)."""
    out, pos = [], 0
    while (start := text.find("<code>", pos)) >= 0:
        end = text.find("</code>", start + 6)
        if end < 0:
            break
        out += [text[pos:start], "`" + unescape(text[start + 6:end]) + "`"]
        pos = end + 7
    return "".join(out) + text[pos:] if out else text


def unescape(text: str) -> str:
    """Markdown backslash escapes and HTML entities as the characters they stand for."""
    return html.unescape(_ESCAPE.sub(r"\1", text))


def prose_escapes(text: str) -> str:
    """Prose with its backslash escapes ("\\<", "\\*") read, outside code spans."""
    return outside_code(text, lambda prose: _ESCAPE.sub(r"\1", prose)) if "\\" in text \
        else text


# The language a code span is highlighted in, written after it: MDC's `x`{lang="ts"},
# kramdown's `x`{:.language-ruby}. The page shows the code only.
_CODE_LANGUAGE = re.compile(r"^\{(?:lang=\"?[\w+-]+\"?|:\s*\.language-[\w+-]+)\}")


# A MyST (Sphinx) role: {ref}`Custom title <target>`, {doc}`../intro`, {py:class}`~a.B`.
# The page shows a link's title (or its target), code roles as code, icons not at all.
_ROLE = re.compile(r"\{([A-Za-z][\w:.-]*)\}$")  # ends the prose before a code span
_CODE_ROLE = re.compile(r"(?:py|js|c|cpp|rst|std|external:\w+):|(?:func|class|meth|attr|mod|obj"
                        r"|data|exc|envvar|option|program|command|file|code|kbd|samp)$")


def _roles(text: str) -> str:
    """``text`` with each MyST role shown as the page shows it (see _ROLE)."""
    out, pos = [], 0
    for span in CODE_SPAN.finditer(text):
        prose = text[pos:span.start()]
        role = _ROLE.search(prose)
        ticks = len(span[1])
        out += [prose[:role.start()], _role(role[1], span.group()[ticks:-ticks])] if role \
            else [prose, span.group()]
        pos = span.end()
    out.append(text[pos:])
    return "".join(out)


def _role(name: str, text: str) -> str:
    text = text.strip()
    if name in ("octicon", "fa", "icon"):
        return ""
    code = bool(_CODE_ROLE.match(name))
    if text.endswith(">") and " <" in text:  # an explicit title
        text = text[:text.rindex(" <")].strip()
    elif code:  # "~a.B" shows "B", "!a.B" shows "a.B" unlinked
        text = text.lstrip("!~").rsplit(".", 1)[-1] if text.startswith("~") else text.lstrip("!")
    return f"`{text}`" if code else text


# One inline element closing where the next opens ("`onMounted`</span><span
# class="options-api">`mounted`", Vue's two API styles): a space keeps their texts apart.
_TAG_SEAM = re.compile(r"</[A-Za-z][\w.-]*\s*><[A-Za-z][\w.-]*(?:\s[^<>]*)?>")


# Jekyll's Liquid tags inside a line: "{% raw %}" and "{% endraw %}" show nothing, and an
# include shows nothing but the version a badge names ("{% include docs_version_badge.html
# version="3.8.0" %}" renders a "3.8.0" badge, shown here as "(3.8.0)").
_LIQUID_TAG = re.compile(r"\{%-?\s*(?:(?:end)?raw\s*-?|include\s[^%{}]*)%\}")  # linear time
_VERSION_ARGUMENT = re.compile(r"""\bversion\s*=\s*["']([^"']+)["']""")


def _liquid(prose: str) -> str:
    return _LIQUID_TAG.sub(lambda m: f"({v.group(1)})" if (
        v := _VERSION_ARGUMENT.search(m.group())) else "", prose)


def clean_inline(text: str) -> str:
    """Prose with inline HTML tags and closed comments removed (``<code>x</code>`` becomes
    a code span, and code spans keep their tags; a comment may close on a later line),
    Liquid raw and include tags as the page shows them, MyST roles shown as the page shows
    them, a code span's language mark dropped and HTML entities shown as the characters
    they stand for."""
    if "{%" in text:
        text = outside_code(text, _liquid)
    if "}`" in text:
        text = _roles(text)
    if "`{" in text:  # (it opens the prose right after a code span)
        text = outside_code(text, lambda prose: _CODE_LANGUAGE.sub("", prose, count=1)
                            if prose.startswith("{") else prose)
    if "<!--" in text:  # a closed comment shows nothing
        text = outside_code(text, lambda prose: INLINE_COMMENT.sub("", prose))
    if "<" in text:
        text = outside_code(html_code_spans(text),
                            lambda prose: HTML_TAG.sub("", _TAG_SEAM.sub(" ", prose)))
    return show_entities(text) if "&" in text else text


# A shortcut reference link, "[regex crate]" (its definition elsewhere in the file): a
# bracketed phrase that starts with a letter, standing apart from words and code.
_SHORTCUT_LINK = re.compile(r"(?<![\w\]\\!`])\[([A-Za-z][^\[\]\n`]*[\w.)])\](?![\[(:\w`])")


def show_links(text: str) -> str:
    """Prose with inline links shown as their text and backslash escapes read ("\\<" as
    "<"), as the rendered page shows them."""
    text = prose_escapes(text)
    if "](" in text or "][" in text:
        spans = [m.span() for m in CODE_SPAN.finditer(text)] if "`" in text else []
        text = _INLINE_LINK.sub(lambda m: m.group(0) if any(  # "`[x](y)`" is code, kept
            a < m.start() < b for a, b in spans) else m.group(1), text)
    return outside_code(text, lambda prose: _SHORTCUT_LINK.sub(r"\1", prose)) \
        if "[" in text else text


def row_text(line: str, header: Sequence[str] = ()) -> str:
    """A table row as its cells joined by "; ", each named by its column when the table
    has a header ("Default: `"all"`; CLI Override: ..."), as a reader pairs them."""
    cells = [show_links(clean_inline(c)) for c in table_cells(line)]
    if len(header) == len(cells):
        cells = [f"{h}: {c}" if h and c else c for h, c in zip(header, cells)]
    return "; ".join(c for c in cells if c)


# --- Hugo shortcodes inside a line -------------------------------------------------------------

_SHORTCODE_NAME = re.compile(r"\s*(/?)([\w.-]+)")  # anchored at the opener's end


def _shortcodes(line: str) -> list[tuple[int, int, bool, str]]:
    """(start, end, closing, name) of each whole shortcode in the line, found by plain
    scanning (str.find), so no line can make it slow."""
    found, pos = [], 0
    while (start := line.find("{{", pos)) >= 0 and start + 2 < len(line):
        kind = line[start + 2]
        if kind not in SHORTCODE_CLOSERS:
            pos = start + 2
            continue
        end = line.find(SHORTCODE_CLOSERS[kind], start + 3)
        if end < 0:
            break
        name = _SHORTCODE_NAME.match(line, start + 3, end)
        if name and "{" not in line[start + 3:end]:
            found.append((start, end + 3, bool(name.group(1)), name.group(2)))
        pos = end + 3
    return found


def show_shortcodes(line: str) -> str:
    """A line of prose with the Hugo shortcodes inside it as a reader can take them: a
    shortcode wrapping words (``{{< kbd >}}Ctrl{{< /kbd >}}``) leaves the words, one that
    stands for a value the page computes (``{{% current-go-version %}}``) leaves its name
    as code. A line that is only shortcodes is markup and stays as it is, and so does a
    version marker (rag.reader.markup reads it)."""
    codes = _shortcodes(line) if "{{" in line else []
    closers = {name for _, _, closing, name in codes if closing}
    between, shown, pos = [], [], 0
    for start, end, closing, name in codes:
        whole = line[start:end]
        between.append(line[pos:start])
        shown.append("" if closing or name in closers else
                     whole if VERSION_SHORTCODE.fullmatch(whole) else f"`{name}`")
        pos = end
    between.append(line[pos:])
    if not codes or not "".join(between).strip():
        return line
    return "".join(text for pair in zip(between, [*shown, ""]) for text in pair)
