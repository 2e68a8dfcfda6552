"""One gate for every reader of docs files after indexing.

Cited lines over HTTP and in the terminal, section merging, ``POST /verify``, ``rag
verify`` and MCP ``read_lines`` all open docs files through here, in one order:

1. **Canonicalise** the path asked for, once (:func:`canonical`): backslashes as
   separators, ``.`` and empty segments dropped; an absolute path, ``..``, surrounding
   blanks or a control character name no docs file.
2. **Map** it to an indexed Source, spelled as the index spells it (NFC and NFD forms of
   a name are the same name); any other path (a symlink or hard-link alias, a file added
   since) is not one.
3. **Check visibility** on that Source, before the file is opened.
4. **Open** it only if it is a regular file at that very path (no symlink on the way),
   under ``docs.max_file_bytes``, without blocking (a FIFO is never waited on).
5. **Check visibility** once more on its front matter as it is now (it may have become
   restricted since indexing).

A caller who may not see a file gets exactly what a caller gets for a file that does not
exist (None), so nothing tells a restricted file from a missing one.
"""

from __future__ import annotations

import stat
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rag.core.config import DocsSettings
from rag.reader.walker import read_text

# The defaults of docs.max_file_bytes (the indexer skips larger files, so none is cited)
# and docs.extensions, for readers that are not handed the settings.
MAX_FILE_BYTES: int = DocsSettings.model_fields["max_file_bytes"].default
DOCS_EXTENSIONS: tuple[str, ...] = tuple(DocsSettings().extensions)


def canonical(requested: object) -> str | None:
    """The docs-relative posix path ``requested`` names, or None when it can name none."""
    if not isinstance(requested, str) or not requested or requested.strip() != requested \
            or any(ord(c) < 32 or ord(c) == 127 for c in requested):
        return None
    posix = PurePosixPath(requested.replace("\\", "/"))
    if posix.is_absolute() or ".." in posix.parts or not posix.parts:
        return None
    return posix.as_posix()


def read_source(docs: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[str, bytes] | None:
    """(text, raw bytes) of the docs file at ``rel``, or None when it is not a readable
    regular file at exactly that path inside ``docs`` (see the module docstring)."""
    try:
        root = docs.resolve()
        target = root / rel
        if target.resolve(strict=True) != target or not stat.S_ISREG(target.lstat().st_mode):
            return None  # a symlink (or a link on the way), a FIFO, a device, a folder
    except (OSError, RuntimeError, ValueError):
        return None
    text, raw, _ = read_text(target, rel, max_bytes)
    return None if text is None or raw is None else (text, raw)


def source_lines(docs: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> list[str] | None:
    """The lines of an indexed Source, numbered as the chunker numbers them, or None."""
    from rag.reader.formats import file_lines

    found = read_source(docs, rel, max_bytes)
    return None if found is None else file_lines(found[0], rel)


@dataclass(frozen=True)
class DocFile:
    rel: str  # the Source path, canonical
    lines: list[str]
    raw: bytes


@dataclass
class DocsGate:
    """Opens the docs files one caller may see; each file once per gate (one request).

    ``sources``: the indexed Source paths (None: any file with a docs extension, for
    ``rag verify`` without an index). ``visible(rel, lines)``: whether the caller may see
    the Source, asked with ``lines=None`` before opening and with its lines after.
    """

    docs: Path
    max_bytes: int = MAX_FILE_BYTES
    sources: Collection[str] | None = None
    visible: Callable[[str, list[str] | None], bool] | None = None
    extensions: tuple[str, ...] = DOCS_EXTENSIONS
    _read: dict[str, DocFile | None] = field(default_factory=dict, repr=False)
    _by_form: dict[str, str] | None = field(default=None, repr=False)

    def source(self, requested: object) -> str | None:
        """The Source path a request names, if it is one this caller may see (unopened)."""
        rel = canonical(requested)
        if rel is None or any(part.startswith(".") for part in rel.split("/")):
            return None
        if self.sources is None:
            if not rel.lower().endswith(tuple(e.lower() for e in self.extensions)):
                return None
        else:
            if self._by_form is None:  # NFC and NFD spellings of one name are one Source
                self._by_form = {unicodedata.normalize("NFC", s): s for s in self.sources}
            found = self._by_form.get(unicodedata.normalize("NFC", rel))
            if found is None:
                return None
            rel = found
        if self.visible is not None and not self.visible(rel, None):
            return None
        return rel

    def open(self, requested: object) -> DocFile | None:
        """The file a request names, or None: missing, not a Source, or not for this caller."""
        rel = self.source(requested)
        if rel is None:
            return None
        if rel not in self._read:
            from rag.reader.formats import file_lines

            found = read_source(self.docs, rel, self.max_bytes)
            doc = None
            if found is not None:
                lines = file_lines(found[0], rel)
                if self.visible is None or self.visible(rel, lines):
                    doc = DocFile(rel, lines, found[1])
            self._read[rel] = doc
        return self._read[rel]
