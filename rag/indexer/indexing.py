"""Indexer: docs folder -> chunks -> vectors, re-doing only what changed.

A file whose bytes are unchanged is neither re-chunked nor re-embedded (unless the chunking
rules changed since the index was built, ``chunking.CHUNK_RULES``, or another reader reads
it now than the one its chunks record, ``Chunk.format``). A chunk whose embedded
text is unchanged keeps its vector even when its lines moved or its file was renamed, because
vectors are looked up by the hash of the text that was embedded.

This module writes the folder store and hands a database store to rag.indexer.pg_writer;
what both writers share (reading and chunking the docs folder, the manifest, embedding) is
rag.indexer.common, re-exported here for callers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rag.core.config import Settings
from rag.core.errors import IndexingError
from rag.core.records import Chunk
from rag.indexer.common import (
    EMBED_WINDOW_BATCHES,
    IndexReport,
    Progress,
    chunk_folder,
    embed_key,
    embed_text,
    embed_texts,
    expected_manifest,
    visibility_for,
)
from rag.indexer.embedding import Embedder
from rag.reader.chunking import CHUNK_RULES
from rag.reader.walker import read_text, walk_docs, walk_sources
from rag.stores import folder as store

__all__ = [
    "EMBED_WINDOW_BATCHES",
    "IndexReport",
    "Progress",
    "build_index",
    "chunk_folder",
    "embed_text",
    "read_text",
    "run_index",
    "visibility_for",
    "walk_docs",
    "walk_sources",
]


def build_index(
    docs_root: Path,
    index_root: Path,
    settings: Settings,
    embedder: Embedder,
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> IndexReport:
    """Bring the configured store's index up to date with docs_root (WRITERS); returns
    what changed. ``index_root`` is the folder store's."""
    return WRITERS[settings.store.kind](docs_root, index_root, settings, embedder,
                                        rebuild=rebuild, progress=progress)


def _build_in_database(docs_root: Path, index_root: Path, settings: Settings,
                       embedder: Embedder, *, rebuild: bool = False,
                       progress: Progress | None = None) -> IndexReport:
    """One shared index in a database (rag/stores/postgres.py): its writer."""
    from rag.indexer.pg_writer import build_index as build_in_database

    return build_in_database(docs_root, settings, embedder, rebuild=rebuild, progress=progress)


def _build_folder(docs_root: Path, index_root: Path, settings: Settings, embedder: Embedder,
                  *, rebuild: bool = False, progress: Progress | None = None) -> IndexReport:
    """The folder store's writer: a new version beside the old, switched in atomically."""
    started = time.perf_counter()
    if not docs_root.is_dir():
        raise IndexingError(f"docs folder {docs_root} does not exist or is not a folder")
    report = IndexReport()
    with store.writer_lock(index_root):
        wanted = expected_manifest(settings, embedder, docs_root)
        old = None if rebuild or not store.exists(index_root) else store.load(index_root)
        if old is not None and (problems := old.manifest.mismatches(wanted)):
            raise IndexingError(
                f"index {index_root}: {problems[0]}; rebuild with `rag index --rebuild`"
            )
        chunks, manifest_files = chunk_folder(docs_root, old, settings, embedder, report)
        vectors, wanted.embedded = _update_vectors(chunks, old, settings, embedder, report,
                                                   progress)
        from rag.stores.lexical import LexicalIndex

        lexical = LexicalIndex.from_chunks(chunks)
        wanted.files = manifest_files
        version = store.write_version(index_root, wanted, chunks, vectors, lexical)
    report.version = version.name
    report.chunks_total = len(chunks)
    report.seconds = time.perf_counter() - started
    return report


# store.kind -> its index writer, beside rag.stores.STORES (which opens what it wrote).
WRITERS: dict[str, Callable[..., IndexReport]] = {"faiss": _build_folder,
                                                  "postgres": _build_in_database}


def _update_vectors(
    chunks: list[Chunk],
    old: store.IndexVersion | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
    progress: Progress | None,
) -> tuple[object, dict[str, str]]:
    """Keep vectors of unchanged embedded text, embed the rest, drop what left the index;
    also returns each chunk's embedded-text key, for the manifest."""
    wanted = {store.faiss_id(c.chunk_id): c for c in chunks}
    old_hash = _old_keys(old)
    # A chunk the old index holds as it is now, under the same rules, shows the same text:
    # its recorded key stands, and only new or changed chunks are read for their text.
    same = _unchanged(old)
    texts = {fid: embed_text(c) for fid, c in wanted.items()
             if not old_hash.get(fid) or same.get(fid) != c}
    hashes = {fid: embed_key(texts[fid]) if fid in texts else old_hash[fid] for fid in wanted}
    fid_of_hash = {h: fid for fid, h in old_hash.items() if h}
    keep = [fid for fid, h in hashes.items() if old_hash.get(fid) == h]
    todo = [fid for fid in wanted if old_hash.get(fid) != hashes[fid]]
    reuse = [fid for fid in todo if hashes[fid] in fid_of_hash]
    embed = [fid for fid in todo if hashes[fid] not in fid_of_hash]
    report.chunks_reused = len(keep) + len(reuse)

    reused = None
    if reuse and old is not None:
        reused = store.reconstruct(old.vectors, [fid_of_hash[hashes[f]] for f in reuse])
    files = len(report.added) + len(report.changed)  # as the summary counts them
    fresh = embed_texts(embedder, [texts[f] for f in embed], settings,
                   progress and (lambda done, total: progress(done, total, files)))
    report.chunks_embedded = len(embed)

    index_settings = settings.index
    if old is not None and index_settings.kind == "flat":
        vectors = old.vectors  # remove what changed or left, add what is new
        stale = [fid for fid in old_hash if fid not in wanted or old_hash[fid] != hashes[fid]]
        if stale:
            import faiss

            vectors.remove_ids(faiss.IDSelectorBatch(np.array(stale, dtype=np.int64)))
    else:
        vectors = store.new_vector_index(
            embedder.dimension, index_settings.kind,
            index_settings.hnsw_m, index_settings.hnsw_ef_construction,
        )
        if keep and old is not None:
            _add(vectors, keep, store.reconstruct(old.vectors, keep))
    if reused is not None:
        _add(vectors, reuse, reused)
    _add(vectors, embed, fresh)
    return vectors, {c.chunk_id: hashes[fid] for fid, c in wanted.items()}


def _unchanged(old: store.IndexVersion | None) -> dict[int, Chunk]:
    """The old index's chunks by vector id, where their recorded keys were made under
    today's rules (else none: every chunk is read again)."""
    if old is None or not old.manifest.embedded or old.manifest.chunk_rules != CHUNK_RULES:
        return {}
    return {store.faiss_id(c.chunk_id): c for c in old.chunks}


def _old_keys(old: store.IndexVersion | None) -> dict[int, str]:
    """The embedded-text key of each vector of the old index ("" where unknown, so never
    reused): as its manifest recorded it, or, for an index from before keys were recorded,
    re-derived with today's rules when they are the rules it was built with."""
    if old is None:
        return {}
    if old.manifest.embedded:
        return {store.faiss_id(c.chunk_id): old.manifest.embedded.get(c.chunk_id, "")
                for c in old.chunks}
    same_rules = old.manifest.chunk_rules == CHUNK_RULES
    return {store.faiss_id(c.chunk_id): embed_key(embed_text(c)) if same_rules else ""
            for c in old.chunks}


def _add(vectors: object, fids: list[int], matrix: np.ndarray) -> None:
    if fids:
        vectors.add_with_ids(  # type: ignore[attr-defined]
            np.ascontiguousarray(matrix, dtype=np.float32), np.array(fids, dtype=np.int64)
        )


def run_index(
    docs_root: Path, index_root: Path, settings: Settings, *, rebuild: bool = False,
    show_progress: bool = True, embedder: Embedder | None = None,
) -> IndexReport:
    """`rag index`: bring the index up to date, showing progress while embedding (a bar on
    a terminal, a plain line every 10 s or tenth otherwise: rag.core.progress)."""
    from rag.indexer.embedding import make_embedder

    embedder = embedder or make_embedder(settings.embedding)
    if not show_progress:
        return build_index(docs_root, index_root, settings, embedder, rebuild=rebuild)
    from rag.core.progress import index_progress

    with index_progress() as progress:
        return build_index(docs_root, index_root, settings, embedder, rebuild=rebuild,
                           progress=progress)
