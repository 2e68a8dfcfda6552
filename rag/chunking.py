"""Markdown chunking: split one Source into heading-aware Chunks with exact line ranges.

Line numbering. A file's text is normalised exactly once, in :func:`parse_document`: a
leading UTF-8 BOM (``\\ufeff``) is removed, ``"\\r\\n"`` becomes ``"\\n"``, and the text is
split on ``"\\n"``; a final line break does not start an extra empty line. Tabs and any
lone ``"\\r"`` stay as they are. ``ParsedDoc.lines[i]`` is then line ``i + 1`` as an editor
shows it, front matter included, and every Chunk keeps this invariant::

    "\\n".join(parsed.lines[chunk.start_line - 1 : chunk.end_line]) == chunk.text

so a citation can always be checked against the file.

Rules (CommonMark where it matters for headings, simplified elsewhere):

* Front matter: YAML (``---`` ... ``---`` or ``...``) or TOML (``+++`` ... ``+++``), only
  when the opening delimiter is line 1 and a closing one exists. It never appears in chunk
  text but counts in line numbers. A parse error gives ``{}``; the block is still skipped.
* Headings: ATX (``#`` to ``######``, up to 3 leading spaces, optional closing ``#``s) and
  setext (``===`` / ``---`` right under a paragraph line). Lines inside fenced code blocks
  (```` ``` ```` or ``~~~``, 3+ chars, closed by the same char at least as long) are never
  headings; a ``---`` after a blank line, a fence, a heading, a list item or a block quote
  is a thematic break, not an underline. A trailing attribute block such as
  ``{ #install }`` is left out of the heading name.
* Heading path: the names of the enclosing headings joined by ``" > "``. Text before the
  first heading gets ``None``: the front matter ``title`` is not used, so every heading
  shown to a reader is really in the file (callers may prefix the title themselves).
* Size: a section over ``max_tokens`` is split on blank lines outside code fences, then on
  line boundaries, never inside a line. A single line longer than ``max_tokens`` becomes a
  chunk of its own; the embedder truncates it, so its tail is not searchable by meaning.
  Every piece keeps its section's heading path.
* Merging: a chunk under ``min_tokens`` (say a heading directly followed by a subheading)
  merges into the next one when the merged text still fits ``max_tokens``; merges chain.
  The merged chunk's heading path is the deepest one that every merged section's path
  either lies under or leads to: ``Install`` + ``Install > From source`` gives
  ``Install > From source`` (text before the first heading leads to every path), while
  ``A > B`` + ``A > C`` gives ``A``.
* Leading and trailing blank lines are trimmed from each chunk; blank chunks are dropped.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml

from rag.records import Chunk
from rag.visibility import read_visibility

HEADING_SEPARATOR = " > "

# Patterns are applied to single lines with fullmatch/match; cheap first-character checks
# in _scan keep most lines away from them.
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_ATTRIBUTES = re.compile(r"[ \t]*\{[ \t]*[#.][^{}]*\}$")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
# List items, block quotes and HTML blocks: a `---` that follows them is a thematic break.
_CONTAINER = re.compile(r" {0,3}(?:(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)|>|<[A-Za-z/!?])")
_INDENTED_CODE = re.compile(r" {0,3}\t| {4}")

_MAX_CHARS_PER_TOKEN = 8  # MiniLM word-pieces in real docs: 3 chars on average, 6.4 at most

# The C loader parses the same YAML as yaml.safe_load, several times faster.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class ParsedDoc:
    """A file's lines (index 0 = line 1, breaks removed) and its front matter."""

    lines: list[str]
    front_matter: dict[str, Any]
    body_start: int  # 1-based line number of the first line after the front matter


class _Span(NamedTuple):
    """Lines ``start..end`` (0-based, inclusive) and their token count."""

    start: int
    end: int
    tokens: int


class _Unit(NamedTuple):
    span: _Span
    paths: tuple[tuple[str, ...], ...]  # heading path of each section merged into it


def parse_document(text: str) -> ParsedDoc:
    """Normalise line breaks and a BOM, split into lines and read the front matter."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final line break ends the last line, it does not start a new one
    front_matter, body_start = _front_matter(lines)
    return ParsedDoc(lines=lines, front_matter=front_matter, body_start=body_start)


def _front_matter(lines: list[str]) -> tuple[dict[str, Any], int]:
    opening = lines[0].rstrip() if lines else ""
    closers = {"---": ("---", "..."), "+++": ("+++",)}.get(opening)
    if closers is None:
        return {}, 1
    for i in range(1, len(lines)):
        if lines[i].rstrip() in closers:
            raw = "\n".join(lines[1:i])
            try:
                data = tomllib.loads(raw) if opening == "+++" else yaml.load(raw, _YAML_LOADER)
            # ValueError also covers TOML syntax, out-of-range YAML dates and bad encodings.
            except (yaml.YAMLError, ValueError, TypeError, RecursionError, OverflowError):
                data = None
            return (data if isinstance(data, dict) else {}), i + 2
    return {}, 1  # no closing delimiter: a leading thematic break, not front matter


def source_id_for(path: str) -> str:
    """Stable id of a Source: sha256 of its relative path (as given), first 16 hex digits."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def chunk_id_for(path: str, text: str, occurrence: int) -> str:
    """Content-addressed id: same path, text and occurrence index give the same id.

    ``occurrence`` counts earlier chunks of the same file with identical text, so
    repeated passages in one file get distinct ids.
    """
    key = f"{path}\x00{occurrence}\x00{text}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def chunk_document(
    text: str,
    path: str,
    *,
    max_tokens: int,
    min_tokens: int,
    count_tokens: Callable[[str], int],
    visibility: tuple[str, ...] = (),
) -> list[Chunk]:
    """Split one Markdown file into Chunks (see the module docstring for the rules).

    ``visibility`` applies to every chunk; when empty, the front matter's ``visibility``
    is used, so a restricted file is never made public by a caller that forgot it
    (UnclearVisibility, a ValueError, when the front matter names it unclearly).
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    doc = parse_document(text)
    lines = doc.lines
    sections, fenced = _sections(lines, doc.body_start - 1)
    sizer = _Sizer(lines, count_tokens, max_tokens)
    units: list[_Unit] = []
    for start, end, path_names in sections:
        span = _trim(lines, start, end)
        if span is None:
            continue
        tokens = sizer.count_if_plausible(*span)
        if tokens is not None and tokens <= max_tokens:
            units.append(_Unit(_Span(span[0], span[1], tokens), (path_names,)))
        else:
            units.extend(_Unit(piece, (path_names,)) for piece in sizer.split(*span, fenced))
    units = _merge_small(units, sizer, min_tokens)

    groups = visibility or read_visibility(text, doc.front_matter, doc.body_start > 1)
    source_id = source_id_for(path)
    seen: dict[str, int] = {}
    chunks = []
    for unit in units:
        chunk_text = "\n".join(lines[unit.span.start : unit.span.end + 1])
        occurrence = seen.get(chunk_text, 0)
        seen[chunk_text] = occurrence + 1
        chunk = Chunk(
            chunk_id=chunk_id_for(path, chunk_text, occurrence), source_id=source_id,
            source_path=path, text=chunk_text,
            start_line=unit.span.start + 1, end_line=unit.span.end + 1,
            heading=HEADING_SEPARATOR.join(_heading_path(unit.paths)) or None, visibility=groups,
        )  # fmt: skip
        chunks.append(chunk)
    return chunks


def _trim(lines: list[str], start: int, end: int) -> tuple[int, int] | None:
    """Shrink lines ``start..end`` (inclusive) past blank edges; None if all blank."""
    while start <= end and not lines[start].strip():
        start += 1
    while end >= start and not lines[end].strip():
        end -= 1
    return (start, end) if start <= end else None


def _heading_name(raw: str) -> str:
    return _ATTRIBUTES.sub("", raw.strip()).strip()


def _scan(lines: list[str], body: int) -> tuple[list[tuple[int, int, str]], list[bool]]:
    """Find headings as (first line, level, name) and mark lines inside code fences."""
    fenced = [False] * len(lines)
    headings: list[tuple[int, int, str]] = []
    fence = ""  # the open fence's delimiter run, "" outside a fence
    para: int | None = None  # first line of the paragraph a setext underline would close
    blocked = False  # in a list item, quote or HTML block: no setext before a blank line
    for i in range(body, len(lines)):
        line = lines[i]
        if fence:
            fenced[i] = True
            close = _FENCE_CLOSE.fullmatch(line)
            if close and close[1][0] == fence[0] and len(close[1]) >= len(fence):
                fence = ""
            continue
        stripped = line.lstrip(" ")
        if not stripped.strip():
            para, blocked = None, False
            continue
        first = stripped[0]
        if first in "`~" and (opening := _FENCE_OPEN.fullmatch(line)):
            if not (first == "`" and "`" in opening[2]):
                fence, fenced[i], para = opening[1], True, None
                continue
        elif first == "#" and (atx := _ATX.fullmatch(line)):
            name = _ATX_CLOSING.sub("", atx[2] or "")
            headings.append((i, len(atx[1]), _heading_name(name)))
            para, blocked = None, False
            continue
        elif first in "=-" and para is not None and _SETEXT.fullmatch(line):
            name = " ".join(part.strip() for part in lines[para:i])
            headings.append((para, 1 if first == "=" else 2, _heading_name(name)))
            para = None
            continue
        if _CONTAINER.match(line):
            para, blocked = None, True
        elif _THEMATIC.fullmatch(line):
            para = None
        elif para is None and not blocked and not _INDENTED_CODE.match(line):
            para = i
    return headings, fenced


def _sections(
    lines: list[str], body: int
) -> tuple[list[tuple[int, int, tuple[str, ...]]], list[bool]]:
    """Sections as (first line, last line, heading path); the first may have no heading."""
    headings, fenced = _scan(lines, body)
    sections: list[tuple[int, int, tuple[str, ...]]] = []
    starts = [h[0] for h in headings] + [len(lines)]
    if starts[0] > body:
        sections.append((body, starts[0] - 1, ()))
    stack: list[tuple[int, str]] = []
    for (start, level, name), next_start in zip(headings, starts[1:], strict=True):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name))
        path = tuple(n for _, n in stack if n)  # empty headings ("#") add no name
        sections.append((start, next_start - 1, path))
    return sections, fenced


class _Sizer:
    """Counts tokens of line ranges and packs ranges into pieces under ``max_tokens``.

    Packing adds up per-block counts (each less the counter's cost of an empty string,
    e.g. special tokens) and checks every packed piece with one real count, so the real
    counter is called on whole paragraphs and pieces, never per character.
    """

    def __init__(self, lines: list[str], count: Callable[[str], int], max_tokens: int) -> None:
        self.lines = lines
        self._count = count
        self.max_tokens = max_tokens
        self.overhead = count("")

    def count(self, start: int, end: int) -> int:
        return self._count("\n".join(self.lines[start : end + 1]))

    def count_if_plausible(self, start: int, end: int) -> int | None:
        """Tokens of a section, or None when it is far too long to fit.

        Counting sections that get split anyway cost most of the time on real docs; a
        wrong guess costs only time, as split() counts every piece it makes."""
        text = "\n".join(self.lines[start : end + 1])
        if len(text) > _MAX_CHARS_PER_TOKEN * self.max_tokens:
            return None
        return self._count(text)

    def split(self, first: int, last: int, fenced: list[bool]) -> list[_Span]:
        """Pieces of a too-long section: paragraphs first, then lines of big paragraphs."""
        items: list[_Span] = []
        for start, end in self._paragraphs(first, last, fenced):
            block = _Span(start, end, self.count(start, end))
            if block.tokens <= self.max_tokens or start == end:
                items.append(block)
                continue
            items.extend(
                _Span(i, i, self._count(self.lines[i]))
                for i in range(start, end + 1)
                if self.lines[i].strip()
            )
        return self._pack(items)

    def _paragraphs(self, start: int, end: int, fenced: list[bool]) -> list[tuple[int, int]]:
        """Runs of lines between blank lines that are not inside a code fence."""
        out: list[tuple[int, int]] = []
        run_start: int | None = None
        for i in range(start, end + 1):
            if not fenced[i] and not self.lines[i].strip():
                if run_start is not None:
                    out.append((run_start, i - 1))
                run_start = None
            elif run_start is None:
                run_start = i
        if run_start is not None:
            out.append((run_start, end))
        # A fence left open at the end of the file can end in blank lines.
        return [span for s, e in out if (span := _trim(self.lines, s, e))]

    def _pack(self, items: list[_Span]) -> list[_Span]:
        groups: list[list[_Span]] = []
        total = 0
        for item in items:
            cost = item.tokens - self.overhead
            if groups and total + cost <= self.max_tokens:
                groups[-1].append(item)
                total += cost
            else:
                groups.append([item])
                total = self.overhead + cost
        pieces: list[_Span] = []
        for group in groups:
            alone = len(group) == 1
            tokens = group[0].tokens if alone else self.count(group[0].start, group[-1].end)
            if tokens <= self.max_tokens or alone:
                pieces.append(_Span(group[0].start, group[-1].end, tokens))
            else:  # the counter is not additive here (tokens across line breaks)
                pieces.extend(self._pack_exact(group))
        return pieces

    def _pack_exact(self, items: list[_Span]) -> list[_Span]:
        pieces: list[_Span] = []
        current = items[0]
        for item in items[1:]:
            tokens = self.count(current.start, item.end)
            if tokens <= self.max_tokens:
                current = _Span(current.start, item.end, tokens)
            else:
                pieces.append(current)
                current = item
        pieces.append(current)
        return pieces


def _merge_small(units: list[_Unit], sizer: _Sizer, min_tokens: int) -> list[_Unit]:
    """Merge each unit under ``min_tokens`` into the next one when the result fits."""
    out: list[_Unit] = []
    carry: _Unit | None = None
    for unit in units:
        if carry is not None:
            tokens = sizer.count(carry.span.start, unit.span.end)
            if tokens <= sizer.max_tokens:
                span = _Span(carry.span.start, unit.span.end, tokens)
                unit = _Unit(span, carry.paths + unit.paths)
            else:
                out.append(carry)
            carry = None
        if unit.span.tokens < min_tokens:
            carry = unit
        else:
            out.append(unit)
    if carry is not None:
        out.append(carry)
    return out


def _heading_path(paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """The deepest path that each given path lies under or is an ancestor of."""
    candidates = {path[:n] for path in paths for n in range(len(path) + 1)}
    return max(
        (c for c in candidates if all(p[: len(c)] == c or c[: len(p)] == p for p in paths)),
        key=len,
    )
