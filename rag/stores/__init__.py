"""Where an index lives: a folder of files (FAISS + BM25, rag/stores/folder.py) or a database.

``[store] kind`` picks one. The folder store is searched by the Retriever itself. A store that
lives in a database searches itself: it filters visibility inside its own queries and hands
back ``(row, score)`` pairs, rows being positions in its ``chunks``. That is the one small
interface below; a loaded folder index (``rag.stores.folder.IndexVersion``) does not implement it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

import numpy as np

from rag.core.records import Chunk

if TYPE_CHECKING:
    from rag.core.config import Settings
    from rag.stores.folder import Manifest, Sources


class SearchableIndex(Protocol):
    """One loaded, read-only index version that runs its own searches."""

    path: Path  # path.name is the version name shown to clients
    manifest: Manifest
    chunks: Sequence[Chunk]  # rows returned by dense() and lexical() index into this

    def visible_count(self, groups: frozenset[str]) -> int:
        """How many chunks these groups may see."""
        ...

    def dense(self, vector: np.ndarray, k: int, groups: frozenset[str]) -> list[tuple[int, float]]:
        """Best k visible rows by cosine similarity to the (normalised) query vector."""
        ...

    def lexical(self, query: str, k: int, groups: frozenset[str]) -> list[tuple[int, float]]:
        """Best k visible rows by BM25, only rows with a positive score."""
        ...

    def document_frequencies(self, words: Sequence[str], groups: frozenset[str]
                             ) -> tuple[dict[str, int], int]:
        """How many visible chunks hold each BM25 word, and how many are visible."""
        ...

    def row_of(self, fid: int) -> int | None:
        """The row of a chunk (by FAISS id) that a search or fetch returned."""
        ...

    def fetch(self, rows: Iterable[int], groups: frozenset[str]) -> None:
        """Make these rows, those the groups may see, readable in ``chunks``."""
        ...

    def sources(self, groups: frozenset[str]) -> Sources:
        """The files and chunks (text left out) these groups may see."""
        ...

    def stale(self) -> bool:
        """True once another process made a newer version current."""
        ...


def searches_itself(index: object) -> TypeGuard[SearchableIndex]:
    """Whether the index runs its own searches (checked on the type: no property is read)."""
    return callable(getattr(type(index), "visible_count", None))


def sources_for(index: Any, groups: frozenset[str]) -> Sources:
    """The Sources of a loaded index for these groups (rag.stores.folder.Sources)."""
    from rag.stores.folder import Sources

    if searches_itself(index):
        return index.sources(groups)  # type: ignore[no-any-return]
    return Sources(index.manifest.files, index.chunks)


def is_stale(index: object) -> bool:
    """A shared index another process has moved on from; a folder index never says so."""
    stale = getattr(type(index), "stale", None)
    return bool(callable(stale) and index.stale())  # type: ignore[attr-defined]


def _folder(index_root: Path, settings: Settings) -> Any:
    from rag.stores import folder

    return folder.load(index_root)


def _postgres(index_root: Path, settings: Settings) -> Any:
    from rag.stores.postgres import PostgresIndex

    return PostgresIndex.open(settings.store.dsn, settings)


# store.kind -> opener(index folder, settings): the live version of that store.
STORES: dict[str, Callable[[Path, Settings], Any]] = {"faiss": _folder, "postgres": _postgres}


def open_index(index_root: Path, settings: Settings) -> Any:
    """The live version of the configured store (``index_root`` is the folder store's)."""
    return STORES[settings.store.kind](index_root, settings)
