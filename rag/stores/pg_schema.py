"""Tables of the PostgreSQL store, and connections to it.

* ``rag_versions``: one row per index version; exactly one has ``is_current`` (a partial
  unique index), and a re-index flips it in one transaction.
* ``rag_chunks``: the chunks of every kept version (``pos`` is the row number within its
  version), with visibility groups as ``text[]``. Row-level security hides restricted
  chunks from a reader role unless the transaction set ``rag.groups`` to one of their groups.
* ``rag_vectors``: one vector per distinct embedded text (sha256), HNSW cosine index
  (built with index.hnsw_m and index.hnsw_ef_construction: pgvector's defaults, 16 and 64,
  missed the three nearest chunks of a dev-set question at ef_search 256; 32 and 200 did not).
  Content-addressed, so any version, or any worker, reuses what was embedded once.
* ``rag_terms``: term frequencies per distinct embedded text (tokenised in Python by
  ``rag.core.text.index_terms``, the same words bm25s sees); ``rag_df``: document frequencies per
  version. BM25 is computed from these at query time, so scores equal the folder store's.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rag.core.errors import IndexingError

ADVISORY_KEY = 0x7261675F696478  # "rag_idx": one writer per database
POOL_SIZE = 8

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS rag_versions (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    manifest jsonb NOT NULL,
    chunks integer NOT NULL,
    avg_len double precision NOT NULL,
    is_current boolean NOT NULL DEFAULT false,
    created timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS rag_versions_current ON rag_versions (is_current)
    WHERE is_current;
CREATE TABLE IF NOT EXISTS rag_vectors (
    content_hash text PRIMARY KEY,
    embedding vector({dim}) NOT NULL
);
CREATE INDEX IF NOT EXISTS rag_vectors_hnsw ON rag_vectors
    USING hnsw (embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {efc});
CREATE TABLE IF NOT EXISTS rag_terms (
    term text NOT NULL,
    content_hash text NOT NULL,
    tf integer NOT NULL,
    PRIMARY KEY (term, content_hash)
);
CREATE INDEX IF NOT EXISTS rag_terms_hash ON rag_terms (content_hash);
CREATE TABLE IF NOT EXISTS rag_chunks (
    version_id bigint NOT NULL REFERENCES rag_versions (id) ON DELETE CASCADE,
    pos integer NOT NULL,
    chunk_id text NOT NULL,
    source_id text NOT NULL,
    source_path text NOT NULL,
    start_line integer NOT NULL,
    end_line integer NOT NULL,
    heading text,
    text text NOT NULL,
    content_hash text NOT NULL,
    length integer NOT NULL,
    visibility text[] NOT NULL DEFAULT '{{}}',
    start_col integer,
    end_col integer,
    PRIMARY KEY (version_id, pos)
);
-- A piece of one long line is text[start_col:end_col] of that line (databases made before
-- these columns get them here; their old versions have none until the next `rag index`).
ALTER TABLE rag_chunks ADD COLUMN IF NOT EXISTS start_col integer,
    ADD COLUMN IF NOT EXISTS end_col integer;
CREATE INDEX IF NOT EXISTS rag_chunks_hash ON rag_chunks (content_hash, version_id);
CREATE TABLE IF NOT EXISTS rag_df (
    version_id bigint NOT NULL REFERENCES rag_versions (id) ON DELETE CASCADE,
    term text NOT NULL,
    df integer NOT NULL,
    PRIMARY KEY (version_id, term)
);
ALTER TABLE rag_chunks ENABLE ROW LEVEL SECURITY;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE tablename = 'rag_chunks'
                   AND policyname = 'rag_chunks_visible') THEN
        CREATE POLICY rag_chunks_visible ON rag_chunks FOR SELECT USING (
            visibility = '{{}}'
            OR visibility && string_to_array(current_setting('rag.groups', true), ','));
    END IF;
END $$;
"""
TABLES = ("rag_versions", "rag_chunks", "rag_vectors", "rag_terms", "rag_df")


def where(dsn: str) -> str:
    """The database a DSN names, for messages: host, port and database, never a password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - an unparsable DSN is reported by connect()
        return "PostgreSQL"
    host = str(parts.get("host") or "localhost")
    if host.startswith("/"):
        host = "local socket"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"PostgreSQL {host}{port}/{parts.get('dbname') or ''}".rstrip("/")


def connect(dsn: str, *, vectors: bool = True) -> Any:
    """One connection; ``vectors`` registers pgvector's types (the extension must exist)."""
    try:
        import psycopg
    except ImportError:
        raise IndexingError(
            "the postgres store needs psycopg and pgvector: pip install -e '.[team]'"
        ) from None
    if not dsn:
        raise IndexingError("store.kind is postgres but store.dsn is empty; set RAG_STORE__DSN")
    try:
        conn = psycopg.connect(dsn, connect_timeout=10)
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IndexingError(f"cannot connect to {where(dsn)}: {first}") from None
    if vectors:
        from pgvector.psycopg import register_vector

        try:
            register_vector(conn)
        except psycopg.ProgrammingError:
            conn.close()
            raise IndexingError(
                f"no index in {where(dsn)} (pgvector is not set up there): build it with "
                "`rag index` and RAG_STORE__KIND=postgres"
            ) from None
        conn.commit()
    return conn


class Pool:
    """A few connections shared by the threads of one process (one pool per DSN)."""

    def __init__(self, dsn: str, size: int = POOL_SIZE) -> None:
        self.dsn = dsn
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        self._slots.acquire()
        conn = None
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = connect(self.dsn)
            yield conn
            if conn.info.transaction_status != 0:  # not idle: something went wrong
                conn.rollback()
            self._idle.put(conn)
            conn = None
        finally:
            if conn is not None:  # broken or interrupted: never hand it out again
                conn.close()
            self._slots.release()


_pools: dict[str, Pool] = {}
_pools_lock = threading.Lock()


def pool(dsn: str) -> Pool:
    with _pools_lock:
        if dsn not in _pools:
            _pools[dsn] = Pool(dsn)
        return _pools[dsn]


def schema_sql(dimension: int, settings: Any) -> str:
    """The DDL above for this embedding dimension and these HNSW settings."""
    m = int(settings.index.hnsw_m)  # pgvector wants ef_construction >= 2 * m
    return SCHEMA.format(dim=int(dimension), m=m,
                         efc=max(int(settings.index.hnsw_ef_construction), 2 * m))
