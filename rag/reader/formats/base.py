"""What every reader gives: a file's lines and its blocks, each with exact line numbers.

A reader turns a file's text into :class:`FileBlock` records. Line numbers are 1-based and
inclusive, counted in the lines the reader returns from :meth:`Reader.lines`, which are the
file's lines as an editor shows them (a UTF-8 BOM removed, ``\\r\\n`` read as ``\\n``), so
``lines[start - 1 : end]`` is where a block's text is written. A notebook is the one
format whose lines are not its bytes as written: each line of a cell's source is stored
as one JSON string on one line of the ``.ipynb`` file, and that line reads as the string
(see :mod:`rag.reader.formats.notebook`); the line numbers are still the file's.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kinds of block. A heading names a section; paragraphs, items and rows are prose that a
# quote can be taken from; code is quoted only as code.
HEADING, PARAGRAPH, ITEM, ROW, CODE = "heading", "paragraph", "item", "row", "code"


@dataclass(frozen=True)
class FileBlock:
    """One block of a file: kind, where it is written, and its text as a reader sees it.

    ``lines`` is the text shown, one entry per line ``start..end`` for paragraphs and
    items (so a sentence can be traced to its lines); a heading's is its name, a code
    block's its code lines, a table row's one Markdown row (``| a | b |``). ``path`` is the
    heading path the block sits under (a heading's own path ends with its name), and
    ``level`` a heading's depth (1 for a page title).
    """

    kind: str
    start: int
    end: int
    lines: tuple[str, ...]
    path: tuple[str, ...] = ()
    level: int = 0
    header: tuple[str, ...] = ()  # a table row's column names, when the table has a header
    column: int | None = None  # where a heading starts in its line, where a reader knows it

    @property
    def text(self) -> str:
        return " ".join(line for line in self.lines if line) if self.kind != CODE \
            else "\n".join(self.lines)


class UnreadableFile(ValueError):
    """A file its reader cannot parse (broken JSON in a notebook, say): it is skipped."""


def split_lines(text: str) -> list[str]:
    """A file's lines as the Markdown chunker numbers them: no BOM, ``\\r\\n`` as ``\\n``,
    and a final line break that does not start an empty line."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class Reader:
    """A file format: how its lines are numbered and what blocks they hold.

    ``markdown`` readers give lines that are Markdown (a Markdown file, a notebook's
    cells): they are chunked and quoted by the Markdown rules (rag.reader.chunking and
    rag.reader.passages). Every other reader implements :meth:`blocks`.
    """

    name = "text"
    markdown = False

    def lines(self, text: str) -> list[str]:
        """The file's lines, numbered as citations number them."""
        return split_lines(text)

    def blocks(self, lines: list[str], path: str) -> list[FileBlock]:
        """The file's blocks in order (UnreadableFile when it cannot be parsed)."""
        raise NotImplementedError
