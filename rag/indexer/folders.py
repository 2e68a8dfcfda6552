"""Which index serves which docs folder, and whether it is up to date.

`rag ask "q" --docs DIR` needs no separate index step: the folder gets an index of its own in
the cache (``$XDG_CACHE_HOME/rag/indexes/<name>-<hash>``, the hash covering the resolved
folder and every setting that shapes the vectors), brought up to date on each call. When
nothing changed, that costs reading and hashing the docs files, and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rag.core.config import DEFAULT_INDEX, Settings
from rag.core.errors import IndexBusyError, IndexingError, RagError
from rag.core.files import atomic_write
from rag.core.paths import keep_private, private_dir, user_cache
from rag.stores import folder as store

if TYPE_CHECKING:
    from rag.indexer.embedding import Embedder
    from rag.indexer.indexing import IndexReport

CHECK_FILE = ".docs-check.json"  # beside CURRENT: the settings the live version was built with
BUSY_WAIT_S = 600.0  # how long to wait for another process that is indexing the same folder


def cache_root() -> Path:
    return user_cache() / "indexes"


def _shape(settings: Settings) -> dict[str, object]:
    """The settings that decide what the vectors and chunks are."""
    return {"embedding": [settings.embedding.model, settings.embedding.backend],
            "chunking": settings.chunking.model_dump(), "index": settings.index.kind}


def cache_index_for(docs: Path, settings: Settings) -> Path:
    """The cache index folder of one docs folder under one embedding model and chunking."""
    real = docs.resolve()
    # The visibility rules are part of the key: two configs that restrict differently never
    # share an index, even for a moment between one's re-index and the other's.
    key = json.dumps([str(real), _shape(settings), settings.visibility.model_dump()],
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / f"{real.name or 'root'}-{digest}"


def docs_of_index(index: Path) -> Path | None:
    """The docs folder the index records in its manifest, if it has one."""
    manifest = store.read_manifest(index)
    return Path(manifest.docs_root) if manifest is not None and manifest.docs_root else None


def _fingerprint(settings: Settings) -> str:
    """Settings a re-index applies even to unchanged files (visibility patterns, file rules),
    and the word index's format: a cache built by an older version is rebuilt, not refused."""
    from rag.stores.lexical import ANALYZER, LAYOUT

    data = {**_shape(settings), "docs": [settings.docs.extensions, settings.docs.max_file_bytes],
            "visibility": settings.visibility.model_dump(), "lexical": [ANALYZER, LAYOUT]}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _live_version(index: Path) -> str:
    try:
        return (index / store.CURRENT).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def is_fresh(docs: Path, index: Path, settings: Settings) -> bool:
    """True when the live version was built from exactly these files with these settings.

    Anything uncertain counts as stale: a re-index that finds nothing to do is only slower.
    """
    from rag.indexer.indexing import read_text, walk_docs

    try:
        check = json.loads((index / CHECK_FILE).read_text(encoding="utf-8"))
        manifest = store.read_manifest(index)
    except (OSError, ValueError, RagError):  # a damaged index: the indexer says what is wrong
        return False
    if (manifest is None or check.get("version") != _live_version(index)
            or check.get("settings") != _fingerprint(settings)
            or manifest.docs_root != str(docs.resolve())):
        return False
    from rag.reader.formats import folder_formats

    files, _ = walk_docs(docs, folder_formats(docs).extensions(settings.docs.extensions))
    seen = 0
    for rel, path in files:
        text, raw, _ = read_text(path, rel, settings.docs.max_file_bytes)
        if text is None or raw is None:
            continue  # skipped by the indexer too
        entry = manifest.files.get(rel)
        if entry is None or entry.content_hash != hashlib.sha256(raw).hexdigest():
            return False
        seen += 1
    return seen == len(manifest.files)


def mark_fresh(index: Path, settings: Settings, version: str) -> None:
    """Record the settings ``version`` was built with (read by is_fresh); only the folder
    store has a folder to keep it in (a database index is simply re-checked each time)."""
    if settings.store.kind != "faiss" or not index.is_dir():
        return
    data = {"version": version, "settings": _fingerprint(settings)}
    atomic_write(index / CHECK_FILE, json.dumps(data))
    keep_private(index)


def update_index(
    docs: Path, index: Path, settings: Settings, embedder: Embedder | None = None, *,
    show_progress: bool = False, wait_s: float = BUSY_WAIT_S,
) -> IndexReport | None:
    """Bring the index up to date with the docs; None when it already was (nothing written).

    When another process is indexing the same folder, wait for it (up to ``wait_s``), then
    check again: two `rag ask --docs` started together index the folder once.
    """
    from rag.indexer.indexing import run_index

    deadline = time.monotonic() + wait_s
    while True:
        if is_fresh(docs, index, settings):
            return None
        try:
            report = run_index(docs, index, settings, show_progress=show_progress,
                               embedder=embedder)
        except IndexBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        mark_fresh(index, settings, report.version)
        return report


@dataclass
class Target:
    """What a command works on: the index folder, the docs folder, a loaded embedder if any."""

    index: Path
    docs: Path
    embedder: Embedder | None = None


def resolve_docs(index: Path | None, docs: Path | None, settings: Settings) -> Path:
    """The docs folder a command's citations point into: ``--docs``, else the one the index
    was built from, else ``docs.root`` (what ``resolve`` gives, without touching the index)."""
    from rag.core.paths import check_index_path

    if docs is not None:
        return docs
    return docs_of_index(check_index_path(index or DEFAULT_INDEX)) or Path(settings.docs.root)


def resolve(index: Path | None, docs: Path | None, settings: Settings, *,
            show_progress: bool = False, warn: Callable[[str], None] | None = None) -> Target:
    """The index and docs folder of a command's ``--index`` and ``--docs``.

    With ``--docs`` the index (``--index``, or else the folder's cache index) is first
    brought up to date with the folder, except in a shared database store, whose one
    writer is `rag index`. Without it, the docs folder is the one the index
    was built from (its manifest), or ``docs.root``.
    """
    from rag.core.paths import check_index_path

    if docs is None:
        return Target(check_index_path(index or DEFAULT_INDEX), resolve_docs(index, None, settings))
    if not docs.is_dir():
        raise IndexingError(f"docs folder {docs} does not exist or is not a folder")
    if settings.store.kind != "faiss":
        # A shared database has one writer, `rag index`: readers only quote from the folder.
        return Target(check_index_path(index or DEFAULT_INDEX), docs)
    # The cache index holds the docs' text: 0700, even where an older version made it 0755.
    index = check_index_path(index) if index is not None else \
        private_dir(cache_index_for(docs, settings))
    if is_fresh(docs, index, settings):
        return Target(index, docs)
    from rag.indexer.embedding import make_embedder

    embedder = make_embedder(settings.embedding, threads=settings.embedding.query_threads)
    report = update_index(docs, index, settings, embedder, show_progress=show_progress)
    if report is not None and warn is not None:
        for line in report.warnings:
            warn(f"warning: {line}")
        # One call a line: a warning is shown as one line, its line breaks escaped.
        first, *more = report.summary().split("\n")
        for line in (f"indexed {docs} into {index}: {first}", *more):
            warn(line)
    return Target(index, docs, embedder)
