"""The PostgreSQL store, write side: `rag index` into the shared database.

Incremental like the folder store: unchanged files are not re-chunked, and a text whose
vector is already in ``rag_vectors`` (looked up by the sha256 of the embedded text) is not
embedded again; a chunk the current version holds unchanged keeps its key and length
without being read again. New vectors are committed as they are embedded, so an
interrupted run keeps its work. The new version's rows are written in one transaction and
made current in a second, short one; readers see the old version or the new one, never a mix. One writer at a time: a
second one stops with one line (a session advisory lock, dropped if the writer dies).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag.core.config import Settings
from rag.core.errors import IndexBusyError, IndexingError
from rag.core.records import Chunk
from rag.indexer.common import (
    IndexReport,
    Progress,
    chunk_folder,
    embed_text,
    embed_texts,
    expected_manifest,
    sha256_hex,
    visibility_for,
)
from rag.indexer.embedding import Embedder
from rag.reader.chunking import CHUNK_RULES
from rag.stores.folder import Manifest
from rag.stores.lexical import chunk_tokens
from rag.stores.pg_schema import ADVISORY_KEY, connect, ensure_schema, hnsw_sql, where

KEEP_VERSIONS = 3  # the current one and two before it, for servers still pinned to them
BATCH = 256  # vectors committed together


@dataclass
class _Old:
    """The current version as the indexer needs it (all chunks: the writer owns the tables)."""

    manifest: Manifest
    chunks: list[Chunk]
    # chunk id -> (the sha256 of its embedded text, its length in BM25 words)
    keys: dict[str, tuple[str, int]]


@contextmanager
def writer_lock(conn: Any, dsn: str) -> Iterator[None]:
    """One writer per database; PostgreSQL drops the lock when the writer's session ends."""
    if not conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_KEY,)).fetchone()[0]:
        raise IndexBusyError(f"the index in {where(dsn)} is being written by another process")
    conn.commit()
    try:
        yield
    finally:
        if not conn.closed:
            conn.rollback()
            conn.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_KEY,))
            conn.commit()


def build_index(
    docs_root: Path, settings: Settings, embedder: Embedder, *, rebuild: bool = False,
    progress: Progress | None = None,
) -> IndexReport:
    """Bring the shared index up to date with docs_root; returns what changed."""
    import psycopg

    started = time.perf_counter()
    if not docs_root.is_dir():
        raise IndexingError(f"docs folder {docs_root} does not exist or is not a folder")
    dsn = settings.store.dsn
    conn = connect(dsn, vectors=False)
    try:
        with writer_lock(conn, dsn):
            ensure_schema(conn, embedder.dimension, settings)
            from pgvector.psycopg import register_vector

            register_vector(conn)
            report = _build(conn, docs_root, settings, embedder, rebuild, progress)
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise IndexingError(f"indexing into {where(dsn)} failed: {first}") from None
    finally:
        conn.close()
    report.seconds = time.perf_counter() - started
    return report


def _build(conn: Any, docs_root: Path, settings: Settings, embedder: Embedder, rebuild: bool,
           progress: Progress | None) -> IndexReport:
    report = IndexReport()
    wanted = expected_manifest(settings, embedder, docs_root)
    old = None if rebuild else _load_current(conn)
    if old is not None and (problems := old.manifest.mismatches(wanted)):
        raise IndexingError(
            f"index in {where(settings.store.dsn)}: {problems[0]}; "
            "rebuild with `rag index --rebuild`")
    chunks, wanted.files = chunk_folder(docs_root, old, settings, embedder, report)
    # A chunk the current version holds as it is now, under the same rules, keeps its key
    # and length; only new or changed chunks (or one whose vector is gone) are read for
    # their text and BM25 words.
    same_rules = old is not None and old.manifest.chunk_rules == CHUNK_RULES
    same = {c.chunk_id: c for c in old.chunks} if old is not None and same_rules else {}
    keys = old.keys if old is not None and same_rules else {}
    known = [same.get(c.chunk_id) == c and c.chunk_id in keys for c in chunks]
    hashes = [keys[c.chunk_id][0] if k else "" for c, k in zip(chunks, known)]
    lengths = [keys[c.chunk_id][1] if k else 0 for c, k in zip(chunks, known)]
    have = set() if rebuild else _existing(conn, "rag_vectors", list(set(hashes) - {""}))
    unique: dict[str, str] = {}  # embedded text by its sha256, for the chunks read anew
    words: dict[str, list[str]] = {}  # what BM25 counts: the folder store's words
    for i, c in enumerate(chunks):
        if hashes[i] in have:
            continue
        text = embed_text(c)
        hashes[i] = h = sha256_hex(text.encode("utf-8"))
        unique[h], words[h] = text, chunk_tokens(c)
        lengths[i] = max(len(words[h]), 1)  # the folder store counts empty as 1
    have |= set() if rebuild else _existing(conn, "rag_vectors", list(unique))
    todo = [h for h in unique if h not in have]
    with _bulk_load(conn, settings):
        _store_vectors(conn, todo, unique, embedder, settings, progress, replace=rebuild)
    report.chunks_embedded = len(todo)
    report.chunks_reused = sum(h in have for h in hashes)

    with conn.transaction():
        version_id, name = _write_version(conn, wanted, chunks, hashes, lengths, words,
                                          rebuild)
        _write_files(conn, version_id, wanted, chunks, settings)
    switch_version(conn, version_id)
    _collect_garbage(conn)
    report.version = name
    report.chunks_total = len(chunks)
    return report


def switch_version(conn: Any, version_id: int) -> None:
    """Make the written version the current one, in one short transaction."""
    with conn.transaction():
        conn.execute("UPDATE rag_versions SET is_current = false WHERE is_current")
        conn.execute("UPDATE rag_versions SET is_current = true WHERE id = %s", (version_id,))


@contextmanager
def _bulk_load(conn: Any, settings: Settings) -> Iterator[None]:
    """Into an empty table, load vectors first and build the HNSW graph once afterwards
    (scripts/store_parity.py, which loads the 3,516 FastAPI vectors: 2.5 min -> 1.1 min)."""
    empty = not conn.execute("SELECT EXISTS (SELECT 1 FROM rag_vectors)").fetchone()[0]
    if empty:
        conn.execute("DROP INDEX IF EXISTS rag_vectors_hnsw")
    conn.commit()
    yield
    if empty:  # a crash before the index is built again: ensure_schema builds it
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute(hnsw_sql(settings))
        conn.commit()


def _load_current(conn: Any) -> _Old | None:
    row = conn.execute("SELECT id, manifest FROM rag_versions WHERE is_current").fetchone()
    if row is None:
        return None
    records = conn.execute(
        "SELECT chunk_id, source_id, source_path, text, start_line, end_line, heading, "
        "visibility, start_col, end_col, format, content_hash, length FROM rag_chunks "
        "WHERE version_id = %s ORDER BY pos", (row[0],)).fetchall()
    chunks = [Chunk(r[0], r[1], r[2], r[3], r[4], r[5], r[6], tuple(r[7] or ()), r[8], r[9],
                    r[10]) for r in records]
    keys = {r[0]: (r[11], r[12]) for r in records}
    files = conn.execute(
        "SELECT path, source_id, content_hash, chunk_ids, front_matter FROM rag_files "
        "WHERE version_id = %s", (row[0],)).fetchall()
    conn.commit()
    manifest = dict(row[1])
    if files or "files" not in manifest:  # a version from before rag_files keeps them here
        manifest["files"] = {r[0]: {"source_id": r[1], "content_hash": r[2],
                                    "chunk_ids": list(r[3]), "visibility": list(r[4])}
                             for r in files}
    return _Old(Manifest.from_dict(manifest), chunks, keys)


def _existing(conn: Any, table: str, hashes: list[str]) -> set[str]:
    rows = conn.execute(f"SELECT DISTINCT content_hash FROM {table} "
                        "WHERE content_hash = ANY(%s)", (hashes,)).fetchall()
    conn.commit()
    return {r[0] for r in rows}


def _store_vectors(conn: Any, todo: list[str], texts: dict[str, str], embedder: Embedder,
                   settings: Settings, progress: Progress | None, *, replace: bool) -> None:
    """Embed in batches; each batch is committed, so a later run never embeds it again."""
    if not todo:
        return
    files = len(todo)  # shown as "files" by the progress bar: distinct texts here
    for start in range(0, len(todo), BATCH):
        part = todo[start:start + BATCH]
        matrix = embed_texts(embedder, [texts[h] for h in part], settings, None)
        with conn.transaction():
            if replace:
                conn.execute("DELETE FROM rag_vectors WHERE content_hash = ANY(%s)", (part,))
            with conn.cursor().copy("COPY rag_vectors (content_hash, embedding) FROM STDIN "
                                    "WITH (FORMAT BINARY)") as copy:
                copy.set_types(["text", "vector"])
                for h, vector in zip(part, matrix):
                    copy.write_row((h, np.asarray(vector, dtype=np.float32)))
        if progress is not None:
            progress(min(start + BATCH, len(todo)), len(todo), files)


def _write_version(conn: Any, manifest: Manifest, chunks: list[Chunk], hashes: list[str],
                   lengths: list[int], words: dict[str, list[str]], rebuild: bool,
                   ) -> tuple[int, str]:
    """All rows of a new, not yet current version (inside the caller's transaction) but its
    files (:func:`_write_files`); ``words``: the BM25 words of each text read anew. No
    statistic over chunks is stored: BM25's are counted per asker at query time
    (rag.stores.postgres)."""
    name = f"v-{time.time_ns():020d}-{uuid.uuid4().hex[:6]}"
    manifest.created = time.time()
    version_id = conn.execute(  # paths are in rag_files, under row-level security
        "INSERT INTO rag_versions (name, manifest, chunks) VALUES (%s, %s::jsonb - 'files', %s)"
        " RETURNING id", (name, manifest.to_json(), len(chunks))).fetchone()[0]
    cur = conn.cursor()
    with cur.copy("COPY rag_chunks (version_id, pos, chunk_id, source_id, source_path, "
                  "start_line, end_line, heading, text, content_hash, length, visibility, "
                  "start_col, end_col, format) FROM STDIN") as copy:
        for pos, (c, h, n) in enumerate(zip(chunks, hashes, lengths)):
            copy.write_row((version_id, pos, c.chunk_id, c.source_id, c.source_path,
                            c.start_line, c.end_line, c.heading, c.text, h, n,
                            list(c.visibility), c.start_col, c.end_col, c.format))
    unique = list(words)
    if rebuild:  # the tokenizer may have changed: count every text's words again
        conn.execute("DELETE FROM rag_terms WHERE content_hash = ANY(%s)", (unique,))
        missing = unique
    else:
        known = {r[0] for r in conn.execute(
            "SELECT DISTINCT content_hash FROM rag_terms WHERE content_hash = ANY(%s)",
            (unique,)).fetchall()}
        missing = [h for h in unique if h not in known]
    with cur.copy("COPY rag_terms (term, content_hash, tf) FROM STDIN") as copy:
        for h in missing:
            for term, tf in Counter(words[h]).items():
                copy.write_row((term, h, tf))
    return int(version_id), name


def _write_files(conn: Any, version_id: int, manifest: Manifest, chunks: list[Chunk],
                 settings: Settings) -> None:
    """The manifest's files, each with the groups that may see its path: its chunks' groups
    (hard links included), or for a file that gave no chunks, the rules for its path."""
    groups = {c.source_path: c.visibility for c in chunks}
    with conn.cursor().copy("COPY rag_files (version_id, path, source_id, content_hash, "
                            "chunk_ids, front_matter, visibility) FROM STDIN") as copy:
        for path, entry in manifest.files.items():
            seen = groups[path] if path in groups else visibility_for(path, entry.visibility,
                                                                      settings)
            copy.write_row((version_id, path, entry.source_id, entry.content_hash,
                            entry.chunk_ids, entry.visibility, list(seen)))


def _collect_garbage(conn: Any) -> None:
    """Drop old versions, then vectors and term counts no kept version uses, and the file
    paths that versions from before rag_files kept in their manifest."""
    with conn.transaction():
        conn.execute("UPDATE rag_versions SET manifest = manifest - 'files' "
                     "WHERE manifest ? 'files'")
        conn.execute("DELETE FROM rag_versions WHERE NOT is_current AND id NOT IN "
                     "(SELECT id FROM rag_versions ORDER BY id DESC LIMIT %s)", (KEEP_VERSIONS,))
        conn.execute("DELETE FROM rag_vectors e WHERE NOT EXISTS "
                     "(SELECT 1 FROM rag_chunks c WHERE c.content_hash = e.content_hash)")
        conn.execute("DELETE FROM rag_terms t WHERE NOT EXISTS "
                     "(SELECT 1 FROM rag_chunks c WHERE c.content_hash = t.content_hash)")
    # Fresh statistics: on new tables the planner otherwise guesses (seq scans, numeric sorts).
    conn.execute("ANALYZE rag_versions, rag_files, rag_chunks, rag_vectors, rag_terms")
    conn.commit()


def import_vectors(settings: Settings, folder: Any) -> int:
    """Copy a folder index's vectors into the database, keyed by the hash of their text, so
    moving an index to PostgreSQL embeds nothing again. ``folder`` is a loaded IndexVersion;
    returns how many vectors were added."""
    from pgvector.psycopg import register_vector

    dsn = settings.store.dsn
    conn = connect(dsn, vectors=False)
    try:
        with writer_lock(conn, dsn):
            ensure_schema(conn, folder.manifest.dimension, settings)
            register_vector(conn)
            by_hash = {sha256_hex(embed_text(c).encode("utf-8")): c for c in folder.chunks}
            have = _existing(conn, "rag_vectors", list(by_hash))
            todo = [h for h in by_hash if h not in have]
            with _bulk_load(conn, settings):
                _copy_vectors(conn, todo, by_hash, folder)
    finally:
        conn.close()
    return len(todo)


def _copy_vectors(conn: Any, todo: list[str], by_hash: dict[str, Chunk], folder: Any) -> None:
    from rag.stores.folder import faiss_id, reconstruct

    for start in range(0, len(todo), BATCH):
        part = todo[start:start + BATCH]
        matrix = reconstruct(folder.vectors, [faiss_id(by_hash[h].chunk_id) for h in part])
        with conn.transaction(), conn.cursor().copy(
                "COPY rag_vectors (content_hash, embedding) FROM STDIN "
                "WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "vector"])
            for h, vector in zip(part, matrix):
                copy.write_row((h, vector))
