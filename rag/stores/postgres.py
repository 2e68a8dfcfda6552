"""The PostgreSQL store, read side: one index version, searched inside the database.

A loaded version is pinned by its id: every query of it names that id, so a request sees
that version only, even while a writer makes a newer one current. A server notices the newer
version through :meth:`PostgresIndex.stale` and loads it; kept versions stay readable until
two more have been made current (see pg_writer.KEEP_VERSIONS).

Visibility is filtered in every query (``visibility = '{}' OR visibility && groups``), and
row-level security (rag.stores.pg_schema) hides restricted chunks, their words and their
file paths from a reader role as a second wall (docs/team.md).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from rag.core.config import Settings
from rag.core.errors import IndexingError, RetrievalError
from rag.core.records import Chunk
from rag.core.text import index_terms
from rag.stores.folder import FileEntry, Manifest, Sources, faiss_id
from rag.stores.pg_schema import Pool, pool, where

# A deadlock or serialization failure aborts one query that a writer's locks crossed;
# PostgreSQL's advice is to run it again (a read is idempotent).
TRANSIENT = ("40P01", "40001")
RETRIES = 3
STALE_CHECK_S = 1.0  # how often a server asks which version is current
SOURCES_CACHE = 32  # group sets whose file listings are kept (a few rows per file each)
DF_CACHE = 100_000  # (group set, word) document frequencies kept
COUNT_CACHE = 128  # group sets whose visible counts are kept (as rag.retriever.retrieval.FILTER_CACHE)
K1, B = 1.5, 0.75  # bm25s defaults (Lucene BM25), so scores equal the folder store's
CHUNK_COLUMNS = ("c.pos, c.chunk_id, c.source_id, c.source_path, c.text, c.start_line, "
                 "c.end_line, c.heading, c.visibility, c.start_col, c.end_col, c.format")
# A database no `rag index` has written since chunks recorded their reader has no format
# column: its chunks read as having none (rag.reader.formats.reader_for decides).
OLD_CHUNK_COLUMNS = CHUNK_COLUMNS.replace("c.format", "NULL::text")
VISIBLE = "(c.visibility = '{}' OR c.visibility && %(groups)s::text[])"
# Rank on narrow rows first, then read the k chunks' columns (text included) once.
WITH_CHUNK = "JOIN rag_chunks c ON c.version_id = %(v)s AND c.pos = top.pos"
# The query's words (q.term) joined to the chunks of this version these groups may see
# that hold them: what BM25 scores and what the word counts count.
VISIBLE_TERMS = ("JOIN rag_terms t ON t.term = q.term "
                 "JOIN rag_chunks c ON c.content_hash = t.content_hash AND c.version_id = %(v)s "
                 f"WHERE {VISIBLE}")


class Rows(Sequence[Chunk]):
    """The chunks of a version, fetched by the searches that return them."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._seen: dict[int, Chunk] = {}
        self._row_of: dict[int, int] = {}  # faiss_id(chunk_id) -> row, for the rows seen

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, row: int) -> Chunk:  # type: ignore[override]
        try:
            return self._seen[row]
        except KeyError:
            raise IndexError(f"row {row} was not returned by a search of this version") from None

    def __iter__(self) -> Iterator[Chunk]:
        # A reader role cannot see every row (row-level security), so a listing would look
        # complete while missing restricted chunks: refuse instead of failing open.
        raise IndexingError("the postgres store hands out chunks through its searches only; "
                            "this needs every chunk of the index (use the folder store)")

    def seen(self, row: int) -> bool:
        return row in self._seen

    def row_of(self, fid: int) -> int | None:
        """The row of the chunk with this FAISS id, if a search or fetch returned it."""
        return self._row_of.get(int(fid))

    def remember(self, record: tuple[Any, ...]) -> int:
        row = int(record[0])
        if row not in self._seen:
            self._seen[row] = Chunk(
                chunk_id=record[1], source_id=record[2], source_path=record[3], text=record[4],
                start_line=int(record[5]), end_line=int(record[6]), heading=record[7],
                visibility=tuple(record[8] or ()), start_col=record[9], end_col=record[10],
                format=record[11])
            self._row_of[faiss_id(record[1])] = row
        return row


class PostgresIndex:
    """One version of the shared index (implements rag.stores.SearchableIndex)."""

    def __init__(self, connections: Pool, version_id: int, name: str, manifest: Manifest,
                 count: int, ef_search: int, exact: bool,
                 columns: str = CHUNK_COLUMNS) -> None:
        self.pool = connections
        self.version_id = version_id
        self.name = name
        self.path = PurePosixPath("postgres") / name  # type: ignore[assignment]
        self.manifest = manifest
        self.chunks = Rows(count)
        self.ef_search = ef_search
        self.exact = exact  # index.kind "flat": exact search, like the folder store's
        self.columns = columns  # what a search reads of each chunk it returns
        # LRU: every distinct group set a token or proxy sends would otherwise stay for good.
        self._counts: OrderedDict[frozenset[str], tuple[int, float]] = OrderedDict()
        self._sources: OrderedDict[frozenset[str], Sources] = OrderedDict()
        self._df: OrderedDict[tuple[frozenset[str], str], int] = OrderedDict()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def open(cls, dsn: str, settings: Settings) -> PostgresIndex:
        """The current version, or one clear line saying there is none."""
        connections = pool(dsn)
        with connections.connection() as conn:
            row = conn.execute(
                "SELECT id, name, manifest - 'files', chunks FROM rag_versions "
                "WHERE is_current").fetchone() if _has_tables(conn) else None
            columns = CHUNK_COLUMNS if row is None or _has_format(conn) else OLD_CHUNK_COLUMNS
            conn.commit()
        if row is None:
            raise IndexingError(
                f"no index in {where(dsn)}: build it with `rag index DOCS_DIR` and "
                "RAG_STORE__KIND=postgres")
        manifest = Manifest.from_dict(row[2])
        return cls(connections, int(row[0]), str(row[1]), manifest, int(row[3]),
                   settings.index.hnsw_ef_search, settings.index.kind == "flat", columns)

    def _run(self, sql: str, params: dict[str, Any], groups: frozenset[str],
             exact: bool = False) -> list[tuple[Any, ...]]:
        """One query in its own transaction, with the groups set for row-level security."""
        import psycopg

        attempt = 0
        while True:
            try:
                with self.pool.connection() as conn, conn.transaction():
                    conn.execute(
                        "SELECT set_config('rag.groups', %s, true), "
                        "set_config('hnsw.ef_search', %s, true), "
                        "set_config('enable_indexscan', %s, true)",
                        (",".join(sorted(groups)), str(min(1000, self.ef_search)),
                         "off" if exact else "on"))
                    return list(conn.execute(sql, {**params, "v": self.version_id,
                                                   "groups": sorted(groups)}).fetchall())
            except psycopg.Error as exc:
                if exc.sqlstate in TRANSIENT and attempt < RETRIES:
                    attempt += 1
                    time.sleep(0.05 * attempt)  # a read changes nothing: run it again
                    continue
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise RetrievalError(f"index database query failed: {first}") from None

    def visible_count(self, groups: frozenset[str]) -> int:
        """How many chunks of this version these groups may see."""
        return self.visible(groups)[0]

    def visible(self, groups: frozenset[str]) -> tuple[int, float]:
        """How many chunks of this version these groups may see, and their mean length in
        BM25 words (kept for COUNT_CACHE group sets).

        The query runs outside the lock: two threads may both count a new set, never block.
        """
        with self._lock:
            if groups in self._counts:
                self._counts.move_to_end(groups)
                return self._counts[groups]
        rows = self._run("SELECT count(*), coalesce(avg(c.length)::float8, 1) FROM rag_chunks c "
                         f"WHERE c.version_id = %(v)s AND {VISIBLE}", {}, groups)
        counted = (int(rows[0][0]), float(rows[0][1]))
        with self._lock:
            self._counts[groups] = counted
            while len(self._counts) > COUNT_CACHE:
                self._counts.popitem(last=False)
        return counted

    def dense(self, vector: np.ndarray, k: int, groups: frozenset[str]) -> list[tuple[int, float]]:
        """Exact for index.kind "flat"; for "hnsw", HNSW candidates joined to this version's
        visible chunks, and exact when too few of them are visible."""
        if k <= 0:
            return []
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        pool_size = max(k, min(1000, self.ef_search))
        rows = [] if self.exact else self._run(
            "WITH near AS MATERIALIZED (SELECT content_hash, embedding <=> %(q)s AS dist "
            "FROM rag_vectors ORDER BY embedding <=> %(q)s LIMIT %(pool)s), "
            "top AS (SELECT c.pos, near.dist FROM near JOIN rag_chunks c "
            "ON c.content_hash = near.content_hash AND c.version_id = %(v)s "
            f"WHERE {VISIBLE} ORDER BY near.dist, c.pos LIMIT %(k)s) "
            f"SELECT {self.columns}, 1 - top.dist FROM top {WITH_CHUNK} ORDER BY top.dist, c.pos",
            {"q": vector, "pool": pool_size, "k": k}, groups)
        if self.exact or len(rows) < min(k, self.visible_count(groups)):
            # Exact search (or visible chunks were rare among the nearest vectors).
            rows = self._run(
                "WITH top AS (SELECT c.pos, e.embedding <=> %(q)s AS dist "
                "FROM rag_chunks c JOIN rag_vectors e ON e.content_hash = c.content_hash "
                f"WHERE c.version_id = %(v)s AND {VISIBLE} ORDER BY dist, c.pos LIMIT %(k)s) "
                f"SELECT {self.columns}, 1 - top.dist FROM top {WITH_CHUNK} "
                "ORDER BY top.dist, c.pos",
                {"q": vector, "k": k}, groups, exact=True)
        return self._ranked(rows)

    def lexical(self, query: str, k: int, groups: frozenset[str]) -> list[tuple[int, float]]:
        """BM25 (bm25s's Lucene formula), inside the database, with the statistics of the
        chunks these groups may see: how many hold each word is counted over the visible
        chunks the query joins anyway, so a restricted chunk never moves a score. Each
        chunk's words are summed in one order, so chunks of equal text tie exactly."""
        counts = Counter(index_terms(query))
        if not counts or k <= 0:
            return []
        visible, mean_length = self.visible(groups)
        if visible == 0:
            return []
        rows = self._run(
            "WITH hits AS (SELECT c.pos, q.term, q.n, t.tf, c.length, "
            "count(*) OVER (PARTITION BY q.term) AS df "
            "FROM unnest(%(terms)s::text[], %(n)s::int[]) AS q(term, n) "
            f"{VISIBLE_TERMS}), "
            "top AS (SELECT pos, sum(n * ln(1 + (%(chunks)s::float8 - df + 0.5::float8) "
            f"/ (df + 0.5::float8)) * tf / (tf + {K1}::float8 * (1 - {B}::float8 + "
            f"{B}::float8 * length / %(mean)s::float8)) ORDER BY term) AS score "
            "FROM hits GROUP BY pos ORDER BY score DESC, pos LIMIT %(k)s) "
            f"SELECT {self.columns}, top.score FROM top {WITH_CHUNK} "
            "ORDER BY top.score DESC, c.pos",
            {"terms": list(counts), "n": list(counts.values()), "k": k, "chunks": visible,
             "mean": mean_length}, groups)
        return [(row, score) for row, score in self._ranked(rows) if score > 0]

    def document_frequencies(self, words: Sequence[str], groups: frozenset[str]
                             ) -> tuple[dict[str, int], int]:
        """How many chunks these groups may see hold each (tokenized) BM25 word, and how
        many they may see: the statistics the lexical search scores with. A version never
        changes, so each (groups, word) count is kept (DF_CACHE of them) and only words not
        counted before are queried."""
        terms = sorted(set(words))
        visible = self.visible_count(groups)
        with self._lock:
            known = {t: self._df[(groups, t)] for t in terms if (groups, t) in self._df}
        missing = [t for t in terms if t not in known]
        if missing and visible:
            rows = self._run(
                "SELECT q.term, count(*) FROM unnest(%(terms)s::text[]) AS q(term) "
                f"{VISIBLE_TERMS} GROUP BY q.term", {"terms": missing}, groups)
            counted = {**dict.fromkeys(missing, 0), **{str(t): int(n) for t, n in rows}}
            with self._lock:
                for t, n in counted.items():
                    self._df[(groups, t)] = n
                while len(self._df) > DF_CACHE:
                    self._df.popitem(last=False)
            known.update(counted)
        return {t: known.get(t, 0) for t in terms}, visible

    def row_of(self, fid: int) -> int | None:
        return self.chunks.row_of(fid)

    def sources(self, groups: frozenset[str]) -> Sources:
        """The files of this version these groups may see and, per file, one chunk for each
        set of groups and reader its chunks have (no text), with the file's chunk count: what
        listing sources, reading lines and re-checking answers need, kept for SOURCES_CACHE
        group sets (a version never changes)."""
        with self._lock:
            if groups in self._sources:
                self._sources.move_to_end(groups)
                return self._sources[groups]
        files = self._run(
            "SELECT f.path, f.source_id, f.content_hash, f.chunk_ids, f.front_matter "
            "FROM rag_files f WHERE f.version_id = %(v)s AND (f.visibility = '{}' OR "
            "f.visibility && %(groups)s::text[]) ORDER BY f.path", {}, groups)
        reader = "c.format" if "c.format" in self.columns else "NULL::text"
        kinds = self._run(
            f"SELECT c.source_path, c.visibility, {reader}, count(*), "
            "(array_agg(c.heading ORDER BY c.pos) FILTER (WHERE c.heading IS NOT NULL))[1], "
            "min(c.pos), (array_agg(c.chunk_id ORDER BY c.pos))[1], "
            "(array_agg(c.source_id ORDER BY c.pos))[1] FROM rag_chunks c "
            f"WHERE c.version_id = %(v)s AND {VISIBLE} GROUP BY 1, 2, 3 ORDER BY 6", {}, groups)
        counts: Counter[str] = Counter()
        chunks = []
        for path, visibility, fmt, n, heading, pos, chunk_id, source_id in kinds:
            counts[str(path)] += int(n)
            chunks.append(Chunk(chunk_id=chunk_id, source_id=source_id, source_path=path,
                                text="", start_line=1, end_line=1, heading=heading,
                                visibility=tuple(visibility or ()), format=fmt))
        found = Sources({str(r[0]): FileEntry(r[1], r[2], list(r[3]), list(r[4] or ()))
                         for r in files}, chunks, dict(counts))
        with self._lock:
            self._sources[groups] = found
            while len(self._sources) > SOURCES_CACHE:
                self._sources.popitem(last=False)
        return found

    def fetch(self, rows: Iterable[int], groups: frozenset[str]) -> None:
        """Read these rows into ``chunks``, those of them the groups may see: a merged hit
        or a quote reading on takes in chunks next to those a search returned."""
        wanted = sorted({r for r in rows if 0 <= r < len(self.chunks) and not self.chunks.seen(r)})
        if wanted:
            self._ranked(self._run(
                f"SELECT {self.columns}, 0 FROM rag_chunks c WHERE c.version_id = %(v)s "
                f"AND c.pos = ANY(%(rows)s::int[]) AND {VISIBLE}", {"rows": wanted}, groups))

    def _ranked(self, rows: list[tuple[Any, ...]]) -> list[tuple[int, float]]:
        with self._lock:
            return [(self.chunks.remember(r), float(r[-1])) for r in rows]

    def stale(self) -> bool:
        now = time.monotonic()
        if now - self._checked < STALE_CHECK_S:
            return False
        self._checked = now
        try:
            with self.pool.connection() as conn:
                row = conn.execute("SELECT id FROM rag_versions WHERE is_current").fetchone()
                conn.commit()
        except Exception:  # noqa: BLE001 - keep the pinned version; its queries will say why
            return False
        return row is not None and int(row[0]) != self.version_id


def _has_tables(conn: Any) -> bool:
    row = conn.execute("SELECT to_regclass('rag_versions') IS NOT NULL").fetchone()
    return bool(row and row[0])


def _has_format(conn: Any) -> bool:
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                       "'rag_chunks'::regclass AND attname = 'format' AND NOT attisdropped)"
                       ).fetchone()
    return bool(row and row[0])
