"""From a reader's blocks to what the rest of the pipeline reads: Chunks and passage Blocks.

- **Chunks** (indexing): a section starts at each heading and wherever the heading path
  changes (a Sphinx object description ends); its lines run to the next section. Lines in
  no block (comments, directive markers, a notebook's JSON, an HTML page's scripts) show
  no text: a chunk never starts or ends on one. Code is never split at a blank line, nor
  from the directive or ``::`` paragraph above it that makes it code, and a title keeps its
  underline: a chunk is quoted from its own lines alone, and must read as it does in the
  file. Sizes and merging are the Markdown chunker's
  (:func:`rag.reader.chunking.chunks_from_sections`), and a chunk's text is its lines of
  the file as they are, so a citation of it is checked against the file exactly as for
  Markdown.
- **Passage blocks** (answering): the blocks of a chunk, read again from its text, as
  rag.reader.passages gives them for Markdown, so quoting works on every format alike.

Heading paths: a page whose headings include no page title (level 1) gets one from its
file name, as a Markdown page does; text before the first heading sits under the first
title.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from rag.core.records import Chunk
from rag.reader.chunking import HEADING_SEPARATOR, Section, chunks_from_sections, file_title
from rag.reader.formats.base import CODE, HEADING, ITEM, PARAGRAPH, ROW, FileBlock
from rag.reader.passages import Block, quotable

_PASSAGE_KIND = {PARAGRAPH: "prose", ITEM: "item", ROW: "row", CODE: "code"}
# A title's adornment ("=====" under it): a chunk that ends on the title without it reads,
# quoted alone, the title as a paragraph.
_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1+")


def rooted(blocks: Sequence[FileBlock], path: str) -> list[FileBlock]:
    """The blocks with every heading path starting at the page's title (see above)."""
    titles = [b.path[0] for b in blocks if b.kind == HEADING and b.level == 1 and b.path]
    first = titles[0] if titles else None
    out = []
    for block in blocks:
        names = block.path
        if first is None:
            names = (file_title(path), *names)
        elif not names:
            names = (first,)
        out.append(replace(block, path=names))
    return out


def layout(blocks: Sequence[FileBlock], count: int, path: str,
           ) -> tuple[list[Section], list[bool], list[bool]]:
    """Sections (0-based lines), which lines show text, which lie in code, for ``count``
    lines holding ``blocks``."""
    content = [False] * count
    fenced = [False] * count
    starts: list[tuple[int, tuple[str, ...]]] = []
    previous: tuple[str, ...] | None = None
    for block in rooted(blocks, path):
        first, last = block.start - 1, min(block.end, count) - 1
        if block.kind == HEADING or block.path != previous:
            starts.append((0 if not starts else first, block.path))
        previous = block.path
        for i in range(first, last + 1):
            content[i] = True
            fenced[i] = fenced[i] or block.kind == CODE
    sections = [(start, (starts[n + 1][0] - 1 if n + 1 < len(starts) else count - 1), names)
                for n, (start, names) in enumerate(starts)]
    return [s for s in sections if s[0] <= s[1]], content, fenced


def chunk_blocks(
    lines: list[str], blocks: Sequence[FileBlock], path: str, *, max_tokens: int,
    min_tokens: int, count_tokens: Callable[[str], int], visibility: tuple[str, ...],
) -> list[Chunk]:
    """The Chunks of a file read into ``blocks``, whose text is the file's own lines."""
    sections, content, fenced = layout(blocks, len(lines), path)
    blank = [bool(line.strip()) for line in lines]
    content = [c and b for c, b in zip(content, blank, strict=True)]
    for block in blocks:
        if block.kind == CODE:  # code stays with the line that introduces it
            _glue_introducer(lines, block.start - 1, content, fenced)
        elif block.kind == HEADING:  # a title's underline (and overline) goes with it
            for i in (block.start - 2, block.end):
                if 0 <= i < len(lines) and _ADORNMENT.fullmatch(lines[i].strip()):
                    content[i] = True
    marks = _marks(rooted(blocks, path))
    breaks = {line - 1: columns for line, found in marks.items()  # (0-based lines)
              if (columns := sorted(column for column, _ in found[1:] if column > 0))}
    chunks = chunks_from_sections(lines, content, sections, fenced, path,
                                  max_tokens=max_tokens, min_tokens=min_tokens,
                                  count_tokens=count_tokens, visibility=visibility,
                                  breaks=breaks)
    return [_headed(chunk, marks) for chunk in chunks]


Marks = dict[int, list[tuple[int, tuple[str, ...]]]]


def _marks(blocks: Sequence[FileBlock]) -> Marks:
    """Each line (1-based) where a heading shares its line with another heading or with
    text (a minified HTML page is one line), and the reader knows where each heading
    starts: the heading path in force from column 0, then each heading's column and path.
    A line with a heading of unknown column is left out: its sections stay whole lines."""
    marks: Marks = {}
    unplaced: set[int] = set()
    text: set[int] = set()
    current: tuple[str, ...] = ()
    for block in blocks:
        if block.kind != HEADING:
            text.update(range(block.start, block.end + 1))
            continue
        if block.column is None:
            unplaced.add(block.start)
        marks.setdefault(block.start, [(0, current)]).append((block.column or 0, block.path))
        current = block.path
    return {line: found for line, found in marks.items()
            if line not in unplaced and (len(found) > 2 or line in text)}


def _headed(chunk: Chunk, marks: Marks) -> Chunk:
    """A piece of a line that holds headings under the heading in force where it starts
    (sections are whole lines, so every piece would bear the line's last heading); the
    line is cut at each heading, so no piece runs on under the next."""
    found = marks.get(chunk.start_line)
    if found is None or chunk.start_col is None:
        return chunk
    names = next(path for column, path in reversed(found) if column <= chunk.start_col) \
        or found[1][1][:1]  # (text before the page's first heading sits under its title)
    return replace(chunk, heading=HEADING_SEPARATOR.join(names) or chunk.heading)


def _glue_introducer(lines: Sequence[str], first: int, content: list[bool],
                     fenced: list[bool]) -> None:
    """Keep a code block (its first line ``first``, 0-based) in one chunk with what above
    it makes it code: a directive and its options (``.. code-block:: python``, then
    ``:caption: app.py``), a ``<pre>`` tag, or else the paragraph above (ending in ``::``).
    Read without it, as a chunk is when it is quoted, the code is indented prose. The
    directive may open a chunk, and no chunk is split between the two."""
    above, top = first - 1, -1
    while above >= 0 and not content[above]:  # blank lines, markup that shows no text
        if lines[above].strip():
            top = above
        above -= 1
    top = top if top >= 0 else above
    if top < 0:
        return
    content[top] = True
    for i in range(top, first):
        fenced[i] = True


def passage_blocks(blocks: Sequence[FileBlock]) -> list[Block]:
    """Quotable blocks of a chunk read by a reader (lines 0-based in the chunk), in the
    shape rag.reader.passages gives for Markdown; headings are not blocks."""
    out: list[Block] = []
    heading, heading_line = "", -1
    for block in blocks:
        if block.kind == HEADING:
            heading, heading_line = HEADING_SEPARATOR.join(block.path), block.start - 1
            continue
        kind = _PASSAGE_KIND.get(block.kind)
        if kind is None or not any(line.strip() for line in block.lines) \
                or not quotable(block.lines, code=kind == "code"):
            continue
        out.append(Block(kind, block.start - 1, block.end - 1, block.lines, heading,
                         heading_line, header=block.header))
    return out


def shown_text(blocks: Sequence[FileBlock]) -> str:
    """The text of the blocks as a reader sees it, one block a paragraph (what is
    embedded and searched for a chunk that is not Markdown)."""
    return "\n\n".join(block.text for block in blocks if block.text.strip())
