"""Docs-generator markup: what a reader of the rendered page never sees as text.

The chunker keeps every chunk's ``text`` equal to the file's lines, markup included, so a
citation can always be checked against the file. What the encoder embeds, and what an
answer shows, should be the page as a reader sees it. :func:`display_lines` maps each
line to that text, one output per input line so line numbers still apply; ``""`` means
the line is pure markup. :func:`clean_markup` is the same for a block of text.

What is removed (outside fenced code blocks unless said otherwise):

* HTML comments ``<!-- ... -->``, also over several lines, and MDX comments ``{/* */}``.
* Link reference definitions (``[foo]: /url "title"``); footnotes (``[^1]: ...``) stay.
  Lines that only anchor a cross-reference (MkDocs ``[](){#strict-mode}``) or set the
  attributes of a block (``{#field-wrap-validator}``, Hugo's ``{.no-wrap-first-col}``,
  kramdown's ``{: .note .info}``).
* Hugo shortcodes ``{{< name args >}}``, ``{{% name %}}`` and their closing forms, also
  inside code blocks (Hugo expands them there too) and over several lines (up to
  ``SHORTCODE_MAX_LINES``). The escaped form ``{{</* x */>}}``, which Hugo renders as
  the literal text ``{{< x >}}``, is shown that way. A version marker such as
  ``{{< new-in 0.140.0 />}}`` is shown as its words, "New in 0.140.0", as Hugo shows a badge.
* Admonition and block markers, keeping their titles: MkDocs ``!!! note "Title"``,
  ``??? tip`` and content tabs ``=== "pip"`` (their 4-space-indented content is shown
  dedented), pymdownx blocks
  ``/// note | Title`` ... ``///``, Docusaurus ``:::tip Title`` (or ``:::tip[Title]``)
  ... ``:::``, and the block components of MDC (Nuxt Content): ``::tip``,
  ``::read-more{to="/docs/x"}``, the closing ``::`` (their content stays).
* Inside a terminal-session block (```` ```console ````), the tags that colour its output
  (``<font color="#4E9A06">fastapi</font>``, ``<span style=...>``): a terminal shows the
  text. Tags in any other code block are code (an HTML template) and stay.
* Lines that start with an HTML or JSX tag lose their tags (``<TabItem value="x">``
  gives ``""``, ``<summary>Why</summary>`` gives ``Why``); tags inside prose stay.
* Whole-line file includes: pymdownx snippets (``--8<-- "file.md"``) and the
  ``{* ../docs_src/app.py hl[3] *}`` and markdown-include ``{!> ../docs_src/app.js!}``
  lines of FastAPI's docs (the page shows the file); inside a code block, snippets and
  markdown-include lines.
* MyST (Sphinx) admonition directives written as fences, ```` ```{note} ```` ... ```` ``` ````
  or ``:::{note}`` ... ``:::``:
  the fence lines and the ``:class: x`` options after the opener show nothing, the content
  is prose, an argument stays ("```{admonition} Title" shows "Title"), and version
  directives read as Sphinx shows them ("```{versionadded} 1.2" shows "New in version 1.2:").
* Inside a code block, TypeScript twoslash markup (VitePress, Svelte, Vue docs): the lines
  before ``// ---cut---`` (setup the page hides), after ``// ---cut-after---`` and between
  ``// ---cut-start---`` and ``// ---cut-end---``; compiler directives such as
  ``// @filename: a.ts`` and ``// @errors: 2345``; type-query marks (``//   ^?``).
* Lines that are only Liquid or Jinja tags (Jekyll, GitBook): ``{% include note.html %}``,
  ``{% hint style="info" %}`` ... ``{% endhint %}`` (the text between stays).
* With ``mdx=True``: ``import`` and ``export`` statements at the start of a line.

Everything here is a linear scan (``str.find`` and anchored patterns without nested or
adjacent unbounded quantifiers), so no line can make it slow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.reader.fences import (
    hidden_code_lines,
    is_include,
    is_session_fence,
    myst_admonitions,
    session_line,
)
from rag.reader.markdown import CODE_SPAN, Code, outline

SHORTCODE_MAX_LINES = 20  # a `{{<` not closed within this many lines is plain text

_LINK_DEFINITION = re.compile(
    r" {0,3}\[(?!\^)[^\[\]]+\]:[ \t]*(?:<[^<>]*>|\S+)"
    r"(?:[ \t]+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?"
)
_MKDOCS = re.compile(
    r" {0,3}(?:!!!|\?\?\?\+?)[ \t]+[\w-]+(?:[ \t]+[\w-]+)*(?:[ \t]+\"([^\"]*)\")?"
)
# An anchor for cross-references, an empty link with attributes: [](){#strict-mode}, or a
# line of attributes for the block above it: {#field-wrap-validator}, {.no-wrap-first-col},
# or kramdown's for the block below or above it: {: .note .info}
_ANCHOR_LINE = re.compile(r"\[\]\(\)\{[^{}]*\}|\{[ \t]*[#.][^{}\s][^{}]*\}|\{:[^{}]*\}")
_TABBED = re.compile(r' {0,3}={3}[!+]?[ \t]+"([^"]*)"')  # MkDocs content tab: === "pip"
_PYMDOWNX = re.compile(r" {0,3}/{3,}(?:[ \t]*[\w-]+(?:[ \t]*\|(.*))?)?")
_DOCUSAURUS = re.compile(r" {0,3}:{3,}(?:[\w-]+)?(.*)")
_LIQUID_LINE = re.compile(r"(?:\{%[^{}]*%\}[ \t]*)+")  # {% include note.html %}, {% endhint %}
_MDC = re.compile(r" {0,3}::(?:[A-Za-z][\w-]*(?:\{[^{}]*\})?)?[ \t]*")  # ::tip, ::read-more{to=x}, ::
HTML_TAG = re.compile(r"</?[A-Za-z][\w.-]*(?:[ \t/][^<>]*)?>")  # not autolinks like <https://x>
# An HTML comment inside a paragraph ("[Raw Identifiers][raw]<!-- ignore -->", its close
# maybe on the next line): the page shows nothing for it, and the words around it.
INLINE_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def without_comments(lines: Sequence[str]) -> tuple[str, ...] | None:
    """The lines (stripped) with every comment that opens and closes within them left out
    (a line stays a line); None when one is left open, or a code span shows one."""
    text = "\n".join(lines)
    if any("<!--" in m[0] for m in CODE_SPAN.finditer(text)):
        return None
    shown = INLINE_COMMENT.sub(lambda m: "\n" * m[0].count("\n"), text)
    return None if "<!--" in shown else tuple(line.strip() for line in shown.split("\n"))
_MDX_STATEMENT = re.compile(r"(?:import|export)[ \t{*]")
SHORTCODE_CLOSERS = {"<": ">}}", "%": "%}}"}  # opener kind -> its closer
# A shortcode that marks when something arrived or went ({{< new-in 0.140.0 />}}): Hugo
# renders it as a "New in v0.140.0" badge, so its words stay.
_VERSION_ARGS = r"([A-Za-z][\w-]*)\s+[\"']?(v?\d+\.\d+(?:\.\d+)?)[\"']?\s*/?\s*"
_VERSION_MARKER = re.compile(r"\s*" + _VERSION_ARGS)  # between {{< and >}}
VERSION_SHORTCODE = re.compile(r"\{\{[<%]\s*" + _VERSION_ARGS + r"[%>]\}\}")


def marker_words(match: re.Match[str]) -> str:
    """A version shortcode as a reader sees it: "New in 0.140.0"."""
    return f"{match[1].replace('-', ' ').replace('_', ' ').capitalize()} {match[2]}"


def version_marker(line: str) -> str:
    """The first version shortcode in a line as words, or "" when it has none."""
    match = VERSION_SHORTCODE.search(line) if "{{" in line else None
    return marker_words(match) if match else ""


_MYST_NAME = re.compile(r"^\{[^{}]*\}\s*")  # {figure}, or Pandoc's {.callout-note}


class _Scanner:
    """State carried from line to line: open comment, shortcode, fence, admonition."""

    def __init__(self, lines: Sequence[str], mdx: bool) -> None:
        self.lines = lines
        self.mdx = mdx
        self.session = False  # the open fence shows a terminal session
        self.in_comment = False
        self.shortcode_until = -1  # last line of a multi-line shortcode being skipped
        self.shortcode_closer = ""
        self.indented = False  # inside the 4-space-indented body of an MkDocs admonition
        self.hidden: frozenset[int] = frozenset()  # lines of the open code block not shown
        found = outline(list(lines))
        # MyST fence lines: what the page shows for each
        self.admonitions = myst_admonitions(lines, found.boxes)
        # Code blocks as the parser finds them: each line's block, and their openers.
        self.code: dict[int, Code] = {}
        for block in found.code:
            self.code.update(dict.fromkeys(range(block.first, block.last + 1), block))

    def line(self, i: int) -> str:
        line = self.lines[i]
        if self.indented:
            if line.startswith(("    ", "\t")):
                line = line[1:] if line[0] == "\t" else line[4:]
            elif line.strip():
                self.indented = False
        if i in self.admonitions:
            return self.admonitions[i]
        block = self.code.get(i)
        if block is not None and i not in block.body:  # a fence line
            if i == block.last and block.closed and block.last > block.first:
                return line
            text = self._comments(self._shortcodes(line, i))
            self.session = is_session_fence(text)
            self.hidden = frozenset(block.body[j] for j in hidden_code_lines(
                [self.lines[k] for k in block.body]))
            return text if text.strip() else ""
        if block is not None:
            if i in self.hidden:
                return ""
            line = self._shortcodes(line, i)
            if is_include(line, in_code=True):
                return ""  # the page shows the included file here, not this line
            return session_line(line) if self.session else line
        text = self._comments(self._shortcodes(line, i))
        if not text.strip():
            return ""
        return self._block_markup(text)

    def _shortcodes(self, line: str, i: int) -> str:
        out: list[str] = []
        pos = 0
        if i <= self.shortcode_until:
            end = line.find(self.shortcode_closer)
            if end < 0:
                return ""
            self.shortcode_until = -1
            pos = end + 3
        unclosed: set[str] = set()  # closers not found after some opener on this line
        while True:
            start = line.find("{{", pos)
            if start < 0 or start + 2 >= len(line) or line[start + 2] not in "<%":
                if start < 0:
                    out.append(line[pos:])
                    return "".join(out)
                out.append(line[pos:start + 2])
                pos = start + 2
                continue
            out.append(line[pos:start])
            kind = line[start + 2]
            closer = SHORTCODE_CLOSERS[kind]
            end = -1 if closer in unclosed else line.find(closer, start + 3)
            if end >= 0:
                inner = line[start + 3:end]
                if inner.startswith("/*") and inner.endswith("*/"):  # escaped: literal text
                    out.append("{{" + kind + inner[2:-2] + closer[:1] + "}}")
                elif marker := _VERSION_MARKER.fullmatch(inner):  # a reader sees "New in 0.140.0"
                    out.append(marker_words(marker))
                pos = end + 3
                continue
            escaped = line.startswith("/*", start + 3)  # literal text, whatever its length
            if not escaped and closer not in unclosed and self._closes_later(i, closer):
                self.shortcode_until, self.shortcode_closer = self._closing_line(i, closer), closer
                return "".join(out)
            unclosed.add(closer)
            out.append(line[start:start + 3])  # never closed: plain text
            pos = start + 3

    def _closing_line(self, i: int, closer: str) -> int:
        last = min(len(self.lines), i + 1 + SHORTCODE_MAX_LINES)
        return next(j for j in range(i + 1, last) if closer in self.lines[j])

    def _closes_later(self, i: int, closer: str) -> bool:
        last = min(len(self.lines), i + 1 + SHORTCODE_MAX_LINES)
        return any(closer in self.lines[j] for j in range(i + 1, last))

    def _comments(self, line: str) -> str:
        out: list[str] = []
        pos = 0
        while pos <= len(line):
            if self.in_comment:
                end = line.find("-->", pos)
                if end < 0:
                    break
                self.in_comment, pos = False, end + 3
                continue
            start = line.find("<!--", pos)
            if start < 0:
                out.append(line[pos:])
                break
            out.append(line[pos:start])
            self.in_comment, pos = True, start + 4
        text = "".join(out)
        if "{/*" in text:  # MDX comments
            text = _drop_between(text, "{/*", "*/}")
        return text if text.strip() else ""

    def _block_markup(self, line: str) -> str:
        stripped = line.strip()
        if _LINK_DEFINITION.fullmatch(stripped) or _ANCHOR_LINE.fullmatch(stripped):
            return ""
        first = stripped[0]
        if first in "!?" and (m := _MKDOCS.fullmatch(stripped)):
            self.indented = True
            return m[1] or ""
        if first == "=" and (m := _TABBED.fullmatch(stripped)):
            self.indented = True
            return m[1]
        if first == "/" and (m := _PYMDOWNX.fullmatch(stripped)):
            return (m[1] or "").strip()
        if first == ":" and (m := _DOCUSAURUS.fullmatch(stripped)):
            title = m[1].strip().removeprefix("[").removesuffix("]").strip()
            return _MYST_NAME.sub("", title)  # :::{figure} x, ::: {.callout-note}: a name
        if first in ":{" and is_template_line(stripped):
            return ""
        if first == "<" and HTML_TAG.match(stripped):
            return _drop_tags(line)
        if self.mdx and _MDX_STATEMENT.match(line):
            return ""
        if is_include(stripped):
            return ""
        return line


_TAB_BLOCK = re.compile(r" {0,3}/{3,}[ \t]*tab[ \t]*\|(.*)")  # pymdownx: /// tab | pip


def tab_title(line: str) -> str:
    """The title of a content tab that the line opens (``=== "pip"``, ``/// tab | pip``,
    quotes or blockquote markers aside), or ""."""
    stripped = line.strip()
    found = _TABBED.fullmatch(stripped) or _TAB_BLOCK.fullmatch(stripped)
    return found[1].strip().strip("\"'") if found else ""


# A code block's title in its opening fence: ```py title="app.py"``` (MkDocs Material,
# also {title="..."}), or VitePress's ```js [vite.config.js]```.
_TITLE_ATTRIBUTE = re.compile(r'\btitle="([^"]*)"')


def code_title(line: str) -> str:
    """The title an opening code fence gives its block, or ""."""
    stripped = line.strip()
    if not stripped.startswith(("```", "~~~")):
        return ""
    info = stripped.lstrip("`~")
    if (found := _TITLE_ATTRIBUTE.search(info)) is not None:
        return found[1].strip()
    if info.endswith("]") and " [" in info:
        return info[info.rindex(" [") + 2:-1].strip()
    return ""


def is_anchor_line(line: str) -> bool:
    """A line that only anchors a cross-reference or sets its block's attributes."""
    return bool(_ANCHOR_LINE.fullmatch(line.strip()))


def is_template_line(line: str) -> bool:
    """A line that is only an MDC block component's marker (``::tip``, ``::``) or only
    Liquid or Jinja tags (``{% include note.html %}``): the page shows nothing for it."""
    stripped = line.strip()
    return bool(_MDC.fullmatch(stripped) or _LIQUID_LINE.fullmatch(stripped))


def _drop_between(text: str, opener: str, closer: str) -> str:
    out: list[str] = []
    pos = 0
    while (start := text.find(opener, pos)) >= 0:
        end = text.find(closer, start + len(opener))
        if end < 0:
            break
        out.append(text[pos:start])
        pos = end + len(closer)
    out.append(text[pos:])
    return "".join(out)


def _drop_tags(line: str) -> str:
    text = HTML_TAG.sub("", line)
    return text if text.strip() else ""


def display_lines(lines: Sequence[str], *, mdx: bool = False) -> list[str]:
    """Each line as a reader of the rendered page sees it; ``""`` for pure markup.

    One output per input line, so ``display_lines(lines)[n - 1]`` is line ``n`` shown
    without markup. ``mdx`` also drops MDX ``import``/``export`` lines. Blank lines and
    text inside fenced code blocks stay as they are (apart from Hugo shortcodes).
    """
    scanner = _Scanner(lines, mdx)
    return [scanner.line(i) for i in range(len(lines))]


def clean_markup(text: str, *, mdx: bool = False) -> str:
    """``text`` without docs-generator markup: what the encoder embeds and answers show.

    Lines that are pure markup are dropped, runs of blank lines become one, and the
    result is stripped. Use :func:`display_lines` when line numbers must stay aligned.
    """
    lines = text.split("\n")
    out: list[str] = []
    for raw, shown in zip(lines, display_lines(lines, mdx=mdx), strict=True):
        if shown.strip():
            out.append(shown)
        elif not raw.strip() and out and out[-1]:
            out.append("")
    return "\n".join(out).strip()


def is_mdx(path: str) -> bool:
    """True for files whose markup is MDX (``.mdx``)."""
    return path.lower().endswith(".mdx")
