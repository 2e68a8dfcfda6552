"""Jupyter notebooks on nbformat: each cell's source at the lines of the ``.ipynb`` file
that store it.

A notebook saved by Jupyter stores each line of a cell's source as one JSON string on a
line of its own (``"Install the package:\\n",``). nbformat reads and checks the notebook;
each cell's lines are then found in the file, in order, as the strings of its ``source``
list, so line 12 of a citation is line 12 of the ``.ipynb`` file as stored.

The reader's lines (:meth:`NotebookReader.lines`) are the file's lines read that way: a
source line reads as its string (decoded, without its line break), every other line of
JSON as blank, and two lines of JSON around each code cell's strings (its ``"source": [``
and the ``]`` that closes it) read as the fence around the code. The line two above each
cell's source reads ``<!-- cell N -->`` (N from 1): it shows no text, and it tells the cell a
cited line belongs to (:func:`cell_of`). Markdown cells are therefore read by the Markdown
rules, code cells as code blocks; outputs, metadata and raw cells are left out.

A cell whose source is stored as one string holding several lines cannot be cited line
by line and is left out; a file that is not a notebook, or one where no cell's source can
be placed at its lines (compact JSON on one line), is UnreadableFile.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rag.reader.formats.base import Reader, UnreadableFile, split_lines

_MARK = re.compile(r"<!-- cell (\d+) -->")
_OPENERS = ('"source": [', '"input": [')  # nbformat 4, and 3's code cells


def _decoded(line: str) -> str | None:
    """The string a line of JSON holds when it is only a string (``"text\\n",``), else None."""
    s = line.strip()
    s = s.removesuffix(",")
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        return None
    try:
        value = json.loads(s)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _parts(source: Any) -> list[str]:
    """A cell's source as the strings Jupyter stores, one per line (line breaks kept)."""
    text = "".join(source) if isinstance(source, list) else str(source or "")
    pieces = text.split("\n")
    out = [p + "\n" for p in pieces[:-1]]
    return out + [pieces[-1]] if pieces[-1] else out


def _shown(value: str) -> str:
    return value.removesuffix("\n").replace("\r", "").replace("\n", " ")


def read_notebook(text: str) -> Any:
    """The notebook as nbformat reads it (version 4), or UnreadableFile."""
    import warnings

    import nbformat

    try:
        with warnings.catch_warnings():  # a missing cell id is nbformat's concern, not ours
            warnings.simplefilter("ignore")
            return nbformat.reads(text, as_version=4, capture_validation_error={})
    except Exception as exc:  # noqa: BLE001 - nbformat raises JSON, schema and conversion errors
        raise UnreadableFile(f"not a Jupyter notebook ({type(exc).__name__})") from None


class NotebookReader(Reader):
    """``.ipynb`` files: cells read as Markdown and code, at the file's own lines."""

    name = "notebook"
    markdown = True

    def lines(self, text: str) -> list[str]:
        raw = split_lines(text)
        notebook = read_notebook(text)
        language = str((notebook.metadata.get("kernelspec") or {}).get("language")
                       or (notebook.metadata.get("language_info") or {}).get("name") or "")
        view = [""] * len(raw)
        decoded = [_decoded(line) for line in raw]
        cursor, placed, unplaced = 0, 0, 0
        for number, cell in enumerate(notebook.cells, 1):
            if cell.cell_type not in ("markdown", "code"):
                continue
            parts = _parts(cell.source)
            found = _find(raw, decoded, parts, cursor)
            if found is None:
                unplaced += bool(parts)
                continue
            placed += 1
            opener, first = found
            last = first + len(parts) - 1
            cursor = last + 1
            # Two lines above the first source line (lines of the cell's own JSON object).
            view[max(first - 2, 0)] = f"<!-- cell {number} -->"
            for i, part in enumerate(parts):
                view[first + i] = _shown(part)
            if cell.cell_type == "code" and opener != first and last + 1 < len(raw):
                ticks = max((len(m) for p in parts for m in re.findall(r"`+", p)), default=0)
                fence = "`" * max(3, ticks + 1)
                view[opener] = fence + language
                view[last + 1] = fence
        if unplaced and not placed:  # compact JSON (one line): no line of it can be cited
            raise UnreadableFile("no cell's source is stored a line per string, as Jupyter "
                                 "saves it; save it again in Jupyter to index it")
        return view


def _find(raw: list[str], decoded: list[str | None], parts: list[str],
          cursor: int) -> tuple[int, int] | None:
    """(line of ``"source": [`` or of a one-string source, first source line), 0-based, of
    the first place at or after ``cursor`` that stores ``parts``; None when none does."""
    if not parts:
        return None
    n = len(parts)
    for i in range(cursor, len(raw)):
        stripped = raw[i].strip()
        if stripped in _OPENERS:
            if decoded[i + 1:i + 1 + n] == parts:
                return i, i + 1
        elif n == 1 and stripped.startswith(('"source": "', '"input": "')):
            try:
                value = json.loads("{" + stripped.rstrip(",") + "}")
            except ValueError:
                continue
            if list(value.values()) == parts:
                return i, i
    return None


def cell_of(lines: list[str], line: int) -> tuple[int, int] | None:
    """(cell number, line within the cell, both from 1) of file line ``line`` of a
    notebook read by :class:`NotebookReader`, or None when it is in no cell's source."""
    for i in range(min(line, len(lines)) - 1, -1, -1):
        mark = _MARK.fullmatch(lines[i])
        if mark:
            within = line - (i + 2)  # the source starts two lines below the mark (0-based i)
            return (int(mark[1]), within) if within >= 1 else None
    return None
