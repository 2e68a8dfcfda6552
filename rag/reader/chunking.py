"""Markdown chunking: split one Source into heading-aware Chunks with exact line ranges.

Line numbering. A file's text is normalised exactly once, in :func:`parse_document`: a
leading UTF-8 BOM (``\\ufeff``) is removed, ``"\\r\\n"`` becomes ``"\\n"``, and the text is
split on ``"\\n"``; a final line break does not start an extra empty line. Tabs and any
lone ``"\\r"`` stay as they are. ``ParsedDoc.lines[i]`` is then line ``i + 1`` as an editor
shows it, front matter included, and every Chunk keeps this invariant::

    span_text(parsed.lines, chunk) == chunk.text

that is ``"\\n".join(parsed.lines[chunk.start_line - 1 : chunk.end_line])``, except for a
piece of one long line (below), whose ``start_col``/``end_col`` select its part of that
line. So a citation can always be checked against the file.

Rules (where headings and code blocks lie is :mod:`rag.reader.markdown`'s reading, on
markdown-it-py):

* Front matter: YAML (``---`` ... ``---`` or ``...``) or TOML (``+++`` ... ``+++``), only
  when the opening delimiter is line 1 and a closing one exists. It never appears in chunk
  text but counts in line numbers. A parse error gives ``{}``; the block is still skipped.
* Headings: ATX and setext headings as CommonMark reads them (also inside list items,
  MkDocs admonitions and content tabs; never inside code or a block quote), except that a
  setext underline under more than ``SETEXT_MAX_LINES`` lines makes no heading. A trailing
  attribute block such as ``{ #install }`` is left out of the heading name, and a name
  over ``MAX_HEADING_CHARS`` is cut, ending in ``…``. Code blocks are fenced ones, at any
  depth; code is never split at a blank line.
* Heading path: the page title, then the names of the enclosing headings, joined by
  ``" > "``. The page title is the front matter's ``title``; a heading equal to it (case
  and spacing aside) at the top of a path is not repeated; a version marker before the
  first heading (``{{< new-in 0.153.0 />}}``) joins it: ``Configure roles (New in
  0.153.0)``. A page without ``title``
  whose headings include an H1 has no extra root: its H1s are the roots, and text
  before the first heading is under the first H1. A page with neither gets a name from
  its file: the stem (the folder's name for ``index``, ``_index`` and ``README``), with
  ``-`` and ``_`` as spaces and the first letter capitalised, so ``getting-started.md``
  gives ``Getting started``.
* Content: front matter, HTML comments, link reference definitions and docs-generator
  markup (see :mod:`rag.reader.markup`) show no text to a reader. A chunk never starts or ends
  with such a line, so none is made only of them; inside a chunk they stay (the text is
  the file's lines). Their lines count in line numbers like any other.
* Size (:mod:`rag.reader.sizing`): a section over ``max_tokens`` is split on blank lines outside
  code fences, then on line boundaries; a single line over ``max_tokens`` is cut into
  pieces at sentence ends (:mod:`rag.reader.sentences`). Such pieces share the line's number
  (``start_line == end_line``) and carry ``start_col``/``end_col``: ``text`` is
  ``line[start_col:end_col]`` (code points). Every piece keeps its section's heading path.
* Merging: a chunk under ``min_tokens`` (say a heading directly followed by a subheading)
  merges into the next one when the merged text still fits ``max_tokens``; merges chain.
  The merged chunk's heading path is the deepest one that every merged section's path
  either lies under or leads to: ``Install`` + ``Install > From source`` gives
  ``Install > From source``, while ``A > B`` + ``A > C`` gives ``A``.
* Leading and trailing lines without content are trimmed from each chunk; chunks
  without content are dropped.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from rag.core.records import Chunk
from rag.reader.markdown import cap, outline
from rag.reader.markup import display_lines, is_mdx, version_marker
from rag.reader.sizing import Sizer, Span, Unit, heading_path, merge_small, trim
from rag.reader.visibility import read_visibility

HEADING_SEPARATOR = " > "
# Raised whenever the rules change what chunks a file gives or what of a chunk is embedded
# (rag.reader.markup's display); an index built under other rules re-chunks every file on the
# next `rag index`, keeping a vector only where its chunk embeds the very same text.
CHUNK_RULES = 16

_INDEX_STEMS = frozenset({"index", "_index", "readme"})

# The C loader parses the same YAML as yaml.safe_load, several times faster.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


Section = tuple[int, int, tuple[str, ...]]  # first line, last line (0-based), heading path


@dataclass(frozen=True)
class ParsedDoc:
    """A file's lines (index 0 = line 1, breaks removed) and its front matter."""

    lines: list[str]
    front_matter: dict[str, Any]
    body_start: int  # 1-based line number of the first line after the front matter
    # Why a closed front-matter block could not be parsed (the YAML or TOML error).
    front_matter_error: str | None = None


def parse_document(text: str) -> ParsedDoc:
    """Normalise line breaks and a BOM, split into lines and read the front matter."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final line break ends the last line, it does not start a new one
    front_matter, body_start, error = _front_matter(lines)
    return ParsedDoc(lines=lines, front_matter=front_matter, body_start=body_start,
                     front_matter_error=error)


def _front_matter(lines: list[str]) -> tuple[dict[str, Any], int, str | None]:
    opening = lines[0].rstrip() if lines else ""
    closers = {"---": ("---", "..."), "+++": ("+++",)}.get(opening)
    if closers is None:
        return {}, 1, None
    for i in range(1, len(lines)):
        if lines[i].rstrip() in closers:
            raw = "\n".join(lines[1:i])
            try:
                data = tomllib.loads(raw) if opening == "+++" else yaml.load(raw, _YAML_LOADER)
            # ValueError also covers TOML syntax, out-of-range YAML dates and bad encodings.
            except (yaml.YAMLError, ValueError, TypeError, RecursionError, OverflowError) as exc:
                return {}, i + 2, f"{type(exc).__name__}: {str(exc).splitlines()[0]:.80}"
            # An empty block, or one that reads as a scalar or list (a thematic break and
            # prose), has no keys; the raw scan still catches a visibility line in it.
            return (data if isinstance(data, dict) else {}), i + 2, None
    return {}, 1, None  # no closing delimiter: a leading thematic break, not front matter


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
    sections, fenced = _sections(doc, path)
    groups = visibility or read_visibility(text, doc)
    return chunks_from_sections(doc.lines, content_lines(doc, path), sections, fenced, path,
                                max_tokens=max_tokens, min_tokens=min_tokens,
                                count_tokens=count_tokens, visibility=groups)


def chunks_from_sections(
    lines: list[str],
    content: list[bool],
    sections: list[Section],
    fenced: list[bool],
    path: str,
    *,
    max_tokens: int,
    min_tokens: int,
    count_tokens: Callable[[str], int],
    visibility: tuple[str, ...],
    breaks: Mapping[int, Sequence[int]] | None = None,
) -> list[Chunk]:
    """Chunks of a file's sections, sized and merged by the rules above: what every format
    shares once its reader has said where the sections lie, which lines show text
    (``content``) and which lie inside code (``fenced``, never split on a blank line).
    ``breaks``: columns of a line (0-based) where a section starts inside it; such a line
    is cut there, into pieces that carry columns."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    sizer = Sizer(lines, content, count_tokens, max_tokens, breaks)
    units: list[Unit] = []
    for start, end, path_names in sections:
        span = trim(content, start, end)
        if span is None:
            continue
        tokens = sizer.fits(*span)
        if tokens is not None:
            units.append(Unit(Span(span[0], span[1], tokens), (path_names,)))
        else:
            units.extend(Unit(piece, (path_names,)) for piece in sizer.split(*span, fenced))
    units = merge_small(units, sizer, min_tokens)

    source_id = source_id_for(path)
    seen: dict[str, int] = {}
    chunks = []
    for unit in units:
        first, last, _, cols = unit.span
        chunk_text = span_text(lines, first + 1, last + 1, *(cols or (None, None)))
        occurrence = seen.get(chunk_text, 0)
        seen[chunk_text] = occurrence + 1
        chunk = Chunk(
            chunk_id=chunk_id_for(path, chunk_text, occurrence), source_id=source_id,
            source_path=path, text=chunk_text, start_line=first + 1, end_line=last + 1,
            heading=HEADING_SEPARATOR.join(heading_path(unit.paths)) or None,
            visibility=visibility,
            start_col=cols[0] if cols else None, end_col=cols[1] if cols else None,
        )  # fmt: skip
        chunks.append(chunk)
    return chunks


def span_text(
    lines: list[str], start_line: int, end_line: int,
    start_col: int | None = None, end_col: int | None = None,
) -> str:
    """The text a chunk must equal: lines ``start_line..end_line`` (1-based, inclusive),
    the first from ``start_col`` and the last up to ``end_col`` when those are given."""
    if start_line == end_line and 1 <= start_line <= len(lines):  # one slice, no copies
        return lines[start_line - 1][start_col:end_col]
    part = lines[start_line - 1 : end_line]
    if part and end_col is not None:
        part[-1] = part[-1][:end_col]
    if part and start_col is not None:
        part[0] = part[0][start_col:]
    return "\n".join(part)


def content_lines(doc: ParsedDoc, path: str) -> list[bool]:
    """For each line: does it show text to a reader (not blank, front matter or markup)?"""
    body = doc.body_start - 1
    shown = display_lines(doc.lines[body:], mdx=is_mdx(path))
    return [False] * body + [bool(line.strip()) for line in shown]


def no_chunks_reason(doc: ParsedDoc, path: str) -> str:
    """Why a file gives no chunks: "empty", "only front matter" or "only markup"."""
    if not any(line.strip() for line in doc.lines):
        return "empty"
    if not any(line.strip() for line in doc.lines[doc.body_start - 1 :]):
        return "only front matter"
    return "only comments, link definitions or markup"


def page_title(front_matter: dict[str, Any]) -> str | None:
    """The front matter's ``title`` as one line (None when absent or empty)."""
    title = front_matter.get("title") if isinstance(front_matter, dict) else None
    if isinstance(title, bool) or not isinstance(title, str | int | float):
        return None
    return cap(" ".join(str(title).split())) or None


def file_title(path: str) -> str:
    """A readable page name from a file name: ``getting-started.md`` -> ``Getting started``."""
    pure = PurePosixPath(path)
    stem = pure.stem
    if stem.lower() in _INDEX_STEMS and pure.parent.name:
        stem = pure.parent.name
    name = " ".join(stem.replace("-", " ").replace("_", " ").split()) or pure.name
    return cap(name[:1].upper() + name[1:])


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _sections(doc: ParsedDoc, path: str) -> tuple[list[Section], list[bool]]:
    """Sections as (first line, last line, heading path), the page title at the root."""
    lines, body = doc.lines, doc.body_start - 1
    found = outline(lines, start=body)
    headings = [(h.line, h.level, h.name) for h in found.headings]
    fenced = found.in_code(len(lines))
    title = page_title(doc.front_matter)
    first_h1 = next((name for _, level, name in headings if level == 1 and name), None)
    page = title or (None if first_h1 else file_title(path))
    starts = [h[0] for h in headings] + [len(lines)]
    # A version marker before the first heading dates the whole page (Hugo shows its
    # badge under the title): it joins the title, so every chunk's path carries it.
    marker = next((m for line in lines[body:starts[0]] if (m := version_marker(line))), "")
    root = f"{page} ({marker})" if page and marker else page

    def rooted(names: tuple[str, ...]) -> tuple[str, ...]:
        if root is None:  # the page's H1s are its roots; an empty `#` falls back to the first
            return names or (first_h1 or file_title(path),)
        if not marker:
            return names if names and _same(names[0], root) else (root, *names)
        return (root, *(names[1:] if names and _same(names[0], page or "") else names))

    sections: list[Section] = []
    if starts[0] > body:  # text before the first heading is under the page's title
        sections.append((body, starts[0] - 1, rooted(())))
    stack: list[tuple[int, str]] = []
    for (start, level, name), next_start in zip(headings, starts[1:], strict=True):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name))
        names = tuple(n for _, n in stack if n)  # empty headings ("#") add no name
        sections.append((start, next_start - 1, rooted(names)))
    return sections, fenced
