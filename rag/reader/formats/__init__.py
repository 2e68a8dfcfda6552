"""Readers that turn docs files into line-exact blocks, one per format, and the registry
that picks one for each file.

| format | files | parser |
| --- | --- | --- |
| Markdown | every suffix not below (``.md``, ``.markdown``, ``.mdx``, ...) | rag.reader.chunking |
| reStructuredText | ``.rst``, ``.rest``, and what a Sphinx ``conf.py`` names | docutils |
| Jupyter notebook | ``.ipynb`` | nbformat |
| HTML | ``.html``, ``.htm`` | lxml |
| plain text | ``.txt`` that no Sphinx ``conf.py`` claims | (paragraphs and titles) |

Which files are read at all is ``docs.extensions``. Whatever the format, a chunk's text is
its lines as the reader numbers them (:mod:`rag.reader.formats.base`), so citations are
checked against the file the same way for all of them. The format is decided once, when a
file is indexed: each chunk records its reader's name (``Chunk.format``), and quoting,
searching and rendering read the chunk with that reader (:func:`reader_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from rag.core.records import Chunk
from rag.reader.chunking import chunk_document, parse_document
from rag.reader.formats.base import FileBlock, Reader, UnreadableFile, split_lines
from rag.reader.formats.sections import chunk_blocks, passage_blocks, shown_text
from rag.reader.passages import Block, read_blocks
from rag.reader.visibility import read_visibility

__all__ = ["FileBlock", "Formats", "Reader", "UnreadableFile", "cell_place", "chunk_file",
           "file_lines", "folder_formats", "place_in_file", "quote_blocks", "reader_for",
           "reader_of", "search_text", "visibility_of"]


class MarkdownReader(Reader):
    """Markdown, chunked and quoted by rag.reader.chunking and rag.reader.passages."""

    name = "markdown"
    markdown = True

    def lines(self, text: str) -> list[str]:
        return parse_document(text).lines


# Reader name -> the module and class that implement it, imported when first needed (a
# Markdown-only folder never loads docutils, nbformat or lxml).
REGISTRY = {"markdown": ("", "MarkdownReader"), "rst": ("rst", "RstReader"),
            "notebook": ("notebook", "NotebookReader"), "html": ("html", "HtmlReader"),
            "text": ("text", "TextReader")}
BY_SUFFIX = {".rst": "rst", ".rest": "rst", ".ipynb": "notebook", ".html": "html",
             ".htm": "html", ".txt": "text"}
_LOADED: dict[str, Reader] = {}


def reader_named(name: str) -> Reader:
    """The registered reader called ``name``."""
    if name not in _LOADED:
        module, cls = REGISTRY[name]
        if not module:
            _LOADED[name] = MarkdownReader()
        else:
            import importlib

            _LOADED[name] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
    return _LOADED[name]


def _suffix(rel: str) -> str:
    return PurePosixPath(rel).suffix.lower()


@dataclass(frozen=True)
class Formats:
    """Which reader reads each file of one docs folder.

    ``sphinx``: each folder (docs-relative, ``""`` for the root) whose ``conf.py`` is a
    Sphinx configuration, with the suffixes it names as reStructuredText; a file under it
    with one of those suffixes is reStructuredText, whatever its suffix says otherwise.
    """

    sphinx: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def reader(self, rel: str) -> Reader:
        suffix = _suffix(rel)
        for folder, suffixes in sorted(self.sphinx.items(), key=lambda kv: -len(kv[0])):
            if suffix in suffixes and (not folder or rel.startswith(folder + "/")):
                return reader_named("rst")
        return reader_named(BY_SUFFIX.get(suffix, "markdown"))

    def extensions(self, configured: Sequence[str]) -> list[str]:
        """The suffixes to read: ``configured``, and while reStructuredText is among them,
        the suffixes Sphinx configurations name."""
        out = list(configured)
        if any(_suffix("x" + e) in (".rst", ".rest") for e in configured):
            out += [s for suffixes in self.sphinx.values() for s in suffixes if s not in out]
        return out


def folder_formats(root: Path) -> Formats:
    """The reading rules of a docs folder: its Sphinx ``conf.py`` files, read, never run."""
    from rag.reader.formats.sphinx_conf import CONF_PLACES, sphinx_suffixes

    found: dict[str, tuple[str, ...]] = {}
    for place in CONF_PLACES:
        conf = root / place / "conf.py" if place else root / "conf.py"
        if conf.is_file():
            suffixes = sphinx_suffixes(conf)
            if suffixes is not None:
                found[place] = suffixes
    return Formats(found)


def reader_for(rel: str, text: str | None = None) -> Reader:
    """The reader for a file when neither its folder's rules nor a recorded reader are at
    hand (an index from before chunks recorded theirs): by suffix, a ``.txt`` read as
    reStructuredText when ``text`` uses its markup."""
    name = BY_SUFFIX.get(_suffix(rel), "markdown")
    if name == "text" and text is not None and _looks_like_rst(text):
        name = "rst"
    return reader_named(name)


def reader_of(chunk: Chunk) -> Reader:
    """The reader that indexed a chunk (its recorded ``format``), so that answering reads
    it as indexing did; for a chunk without one, :func:`reader_for` decides."""
    if chunk.format in REGISTRY:
        return reader_named(chunk.format)
    return reader_for(chunk.source_path, chunk.text)


def _looks_like_rst(text: str) -> bool:
    from rag.reader.formats.sphinx_conf import looks_like_rst

    return looks_like_rst(text)


def file_lines(text: str, rel: str) -> list[str]:
    """A file's lines as its citations number them (a notebook's as its reader reads them;
    a file that no longer reads as a notebook, as written, which no citation matches)."""
    reader = reader_named(BY_SUFFIX.get(_suffix(rel), "markdown"))
    if reader.name == "notebook":
        try:
            return reader.lines(text)
        except UnreadableFile:
            return split_lines(text)
    return parse_document(text).lines


def cell_place(rel: str, lines: list[str], start: int, end: int,
               fmt: str | None = None) -> dict[str, Any] | None:
    """Where cited lines ``start``-``end`` of a notebook (``lines`` as its reader reads it;
    ``fmt``, the recorded reader, else the suffix decides) sit as its author sees them:
    ``{"cell": 3, "cell_lines": [2, 4]}``, with ``"end_cell": 4`` when they run on into a
    later cell (the second number then counts in that cell). None for other files and for
    lines in no cell."""
    if (fmt if fmt in REGISTRY else BY_SUFFIX.get(_suffix(rel))) != "notebook":
        return None
    from rag.reader.formats.notebook import cell_of

    # The first and last cited lines in a cell: a range may open on a code cell's fence
    # (its ``"source": [`` line) and end on the next cell's own JSON lines.
    first = next((p for n in range(start, end + 1) if (p := cell_of(lines, n))), None)
    if first is None:
        return None
    last = next((p for n in range(end, start, -1) if (p := cell_of(lines, n))), first)
    place: dict[str, Any] = {"cell": first[0], "cell_lines": [first[1], last[1]]}
    if last[0] != first[0]:
        place["end_cell"] = last[0]
    return place


def place_in_file(rel: str, lines: list[str], start: int, end: int,
                  fmt: str | None = None) -> str | None:
    """:func:`cell_place` in words: ``cell 3, lines 2-4``; None for other files."""
    place = cell_place(rel, lines, start, end, fmt)
    if place is None:
        return None
    first, last = place["cell_lines"]
    if "end_cell" in place:
        return f"cell {place['cell']}, from line {first}"
    span = f"line {first}" if first == last else f"lines {first}-{last}"
    return f"cell {place['cell']}, {span}"


def chunk_file(
    text: str, rel: str, reader: Reader, *, max_tokens: int, min_tokens: int,
    count_tokens: Callable[[str], int], visibility: tuple[str, ...],
) -> list[Chunk]:
    """The Chunks of one file read by ``reader``, each recording its name (UnreadableFile
    when the file cannot be read)."""
    sizes = {"max_tokens": max_tokens, "min_tokens": min_tokens, "count_tokens": count_tokens,
             "visibility": visibility}
    if reader.name == "markdown":
        chunks = chunk_document(text, rel, **sizes)  # type: ignore[arg-type]
        return [replace(c, format=reader.name) for c in chunks]
    try:
        lines = reader.lines(text)
        if reader.markdown:
            chunks = chunk_document("\n".join(lines), rel, **sizes)  # type: ignore[arg-type]
        else:
            chunks = chunk_blocks(lines, reader.blocks(lines, rel), rel, **sizes)  # type: ignore[arg-type]
        chunks = [replace(c, format=reader.name) for c in chunks]
        # A piece of a line that shows nothing (a minified page's head and navigation)
        return [c for c in chunks if c.start_col is None or reader.markdown or search_text(c)]
    except UnreadableFile:
        raise
    except Exception as exc:  # a parser's own failure on one file must not stop the folder
        raise UnreadableFile(f"cannot be read as {reader.name} ({type(exc).__name__})") from exc


def visibility_of(rel: str, lines: list[str], reader: Reader) -> tuple[str, ...]:
    """Groups a non-Markdown file restricts itself to, from its lines (UnclearVisibility).

    Front matter is read as in Markdown (a file exported from Markdown keeps its rule);
    a reStructuredText or text field ``:visibility: staff`` at the top, or an HTML
    ``<meta name="visibility" content="staff">``, restricts it too. Set both ways, or
    unclearly, the file is left out (rag.reader.visibility).
    """
    from rag.reader.formats.declared import declared_visibility

    text = "\n".join(lines)
    front = read_visibility(text, parse_document(text))
    declared = declared_visibility(lines, html=reader.name == "html")
    if front and declared:
        from rag.reader.visibility import UnclearVisibility

        raise UnclearVisibility("visibility is set both in front matter and in the file's "
                                "own fields")
    return front or declared


def quote_blocks(chunk: Chunk) -> list[Block]:
    """The quotable blocks of a chunk (lines 0-based in the chunk), read as it was indexed."""
    reader = reader_of(chunk)
    if reader.markdown:
        return read_blocks(chunk.text, chunk.start_line == 1 and reader.name == "markdown")
    try:
        return passage_blocks(reader.blocks(chunk.text.split("\n"), chunk.source_path))
    except Exception:  # noqa: BLE001 - a chunk that no longer parses offers no quote
        return []


def search_text(chunk: Chunk) -> str | None:
    """What is embedded and searched for a chunk whose lines are not Markdown (its blocks'
    text, markup left out); None for Markdown, whose own rules apply."""
    reader = reader_of(chunk)
    if reader.markdown:
        return None
    try:
        return shown_text(reader.blocks(chunk.text.split("\n"), chunk.source_path))
    except Exception:  # noqa: BLE001 - indexed as it is written rather than not at all
        return chunk.text
