"""Tables of the PostgreSQL store, and connections to it.

* ``rag_versions``: one row per index version; exactly one has ``is_current`` (a partial
  unique index), and a re-index flips it in one transaction. Its manifest holds the
  settings an index was built under, never file paths.
* ``rag_files``: the manifest's files (path, content hash, chunk ids) per version, with the
  groups that may see each path.
* ``rag_chunks``: the chunks of every kept version (``pos`` is the row number within its
  version), with visibility groups as ``text[]`` and the reader that indexed each
  (``format``, NULL in versions written before it was recorded).
* ``rag_vectors``: one vector per distinct embedded text (sha256), HNSW cosine index
  (built with index.hnsw_m and index.hnsw_ef_construction: pgvector's defaults, 16 and 64,
  missed the three nearest chunks of a dev-set question at ef_search 256; 32 and 200 did not).
  Content-addressed, so any version, or any worker, reuses what was embedded once.
* ``rag_terms``: term frequencies per distinct embedded text (tokenised in Python by
  ``rag.core.text.index_terms``, the folder store's words). BM25's statistics (how many
  chunks hold a word, how many there are, their mean length) are computed at query time
  over the chunks the asker may see, so scores equal the folder store's and say nothing of
  restricted chunks.

Row-level security covers every table that holds text, words or paths: a reader role sees
a row of ``rag_chunks`` or ``rag_files`` only if it is public or the transaction set
``rag.groups`` to one of its groups, and a row of ``rag_terms`` only if a chunk it may see
has that text. The table owner (the indexer) is not subject to it.
"""

from __future__ import annotations

import hashlib
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
    is_current boolean NOT NULL DEFAULT false,
    created timestamptz NOT NULL DEFAULT now()
);
-- The mean chunk length over every chunk, from before it was counted per asker.
ALTER TABLE rag_versions DROP COLUMN IF EXISTS avg_len;
CREATE UNIQUE INDEX IF NOT EXISTS rag_versions_current ON rag_versions (is_current)
    WHERE is_current;
CREATE TABLE IF NOT EXISTS rag_vectors (
    content_hash text PRIMARY KEY,
    embedding vector({dim}) NOT NULL
);
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
    format text,
    PRIMARY KEY (version_id, pos)
);
-- A piece of one long line is text[start_col:end_col] of that line, and format the reader
-- that indexed the chunk (databases made before these columns get them here; their old
-- versions have none until the next `rag index`).
ALTER TABLE rag_chunks ADD COLUMN IF NOT EXISTS start_col integer,
    ADD COLUMN IF NOT EXISTS end_col integer, ADD COLUMN IF NOT EXISTS format text;
CREATE INDEX IF NOT EXISTS rag_chunks_hash ON rag_chunks (content_hash, version_id);
-- Document frequencies over every chunk, restricted ones included, from before BM25's
-- statistics were computed per asker: gone, so no reader can count restricted words.
DROP TABLE IF EXISTS rag_df;
CREATE TABLE IF NOT EXISTS rag_files (
    version_id bigint NOT NULL REFERENCES rag_versions (id) ON DELETE CASCADE,
    path text NOT NULL,
    source_id text NOT NULL,
    content_hash text NOT NULL,
    chunk_ids text[] NOT NULL,
    front_matter text[] NOT NULL DEFAULT '{{}}',
    visibility text[] NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (version_id, path)
);
"""
HNSW = """CREATE INDEX IF NOT EXISTS rag_vectors_hnsw ON rag_vectors
    USING hnsw (embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {efc});
"""
# Who may see a row: public, or one of the groups the server set for this transaction.
_ALLOWED = "visibility = '{}' OR visibility && string_to_array(current_setting('rag.groups', " \
           "true), ',')"
# A text's words: only where a chunk the reader may see (rag_chunks' own policy applies
# inside the subquery) has that text.
_SEEN_TEXT = "EXISTS (SELECT 1 FROM rag_chunks c WHERE c.content_hash = rag_terms.content_hash)"
# rag_vectors has none: a vector holds no text, word or path and is reached only through
# rag_chunks, and the same check on each candidate of a vector search made dense search
# as a reader role twice as slow (scripts/bench_postgres.py --size 20000 --reader).
POLICIES = {"rag_chunks": _ALLOWED, "rag_files": _ALLOWED, "rag_terms": _SEEN_TEXT}


def _policy(table: str, using: str) -> str:
    """Row-level security on one table, its SELECT policy created once."""
    return f"""ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE tablename = '{table}'
                   AND policyname = '{table}_visible') THEN
        CREATE POLICY {table}_visible ON {table} FOR SELECT USING ({using});
    END IF;
END $$;
"""


TABLES = ("rag_versions", "rag_files", "rag_chunks", "rag_vectors", "rag_terms")


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
    return SCHEMA.format(dim=int(dimension)) + hnsw_sql(settings) + "".join(
        _policy(table, using) for table, using in POLICIES.items())


def hnsw_sql(settings: Any) -> str:
    """The vectors' HNSW index, built with these settings if it is missing."""
    m = int(settings.index.hnsw_m)  # pgvector wants ef_construction >= 2 * m
    return HNSW.format(m=m, efc=max(int(settings.index.hnsw_ef_construction), 2 * m))


def ensure_schema(conn: Any, dimension: int, settings: Any) -> None:
    """Create or bring up to date the tables, unless this very DDL already ran here.

    The DDL takes exclusive locks on several tables in one transaction, and a reader's query
    locks them one by one: run on every `rag index`, it could deadlock with a server's
    search. A database it has run on is marked with the DDL's hash (a comment on
    rag_versions; a database from before has none); the HNSW index is checked as well, as
    a bulk load drops it and a crash can stop before it is built again.
    """
    sql = schema_sql(dimension, settings)
    mark = "rag schema " + hashlib.sha256(sql.encode("utf-8")).hexdigest()[:16]
    row = conn.execute("SELECT to_regclass('rag_vectors_hnsw') IS NOT NULL AND "
                       "obj_description(to_regclass('rag_versions'), 'pg_class') = %s",
                       (mark,)).fetchone()
    if not row[0]:
        conn.execute(sql + f"COMMENT ON TABLE rag_versions IS '{mark}';")
    conn.commit()
