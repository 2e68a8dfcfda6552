"""Writing the PostgreSQL store: re-indexing embeds only what changed, version switches that
readers see whole, the writer lock, deadlocks with readers, a killed indexer. Searches,
visibility and databases from before are tested in tests/test_postgres_store.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.errors import IndexBusyError, IndexingError, RetrievalError
from rag.indexer.indexing import build_index
from rag.pipeline import open_retriever
from rag.stores import postgres
from rag.stores.pg_schema import ADVISORY_KEY
from tests.test_postgres_store import QUERIES, UNUSED, pg_settings, run_sql

REPO = Path(__file__).resolve().parents[1]


def test_reindex_embeds_only_what_changed(docs, pg_dsn, embedder):
    settings = pg_settings(pg_dsn)
    first = build_index(docs, UNUSED, settings, embedder)
    assert first.chunks_embedded > 0 and embedder.calls == first.chunks_embedded
    again = build_index(docs, UNUSED, settings, embedder)
    assert again.chunks_embedded == 0 and again.unchanged and embedder.calls == first.chunks_embedded
    (docs / "faq.md").write_text("# FAQ\n\nTides come twice a day.\n", encoding="utf-8")
    calls = embedder.calls
    changed = build_index(docs, UNUSED, settings, embedder)
    assert changed.changed == ["faq.md"]
    assert embedder.calls - calls == changed.chunks_embedded == 1
    hits = open_retriever(UNUSED, settings, embedder).search("tides twice a day", k=1)
    assert hits[0].chunk.source_path == "faq.md" and "Tides" in hits[0].chunk.text


def test_reindex_reads_only_new_or_changed_chunks_and_keeps_their_counts(docs, pg_dsn,
                                                                         embedder, monkeypatch):
    from rag.indexer import pg_writer

    settings = pg_settings(pg_dsn)
    build_index(docs, UNUSED, settings, embedder)
    lengths = run_sql(pg_dsn, "SELECT chunk_id, content_hash, length FROM rag_chunks r "
                      "JOIN rag_versions v ON v.id = r.version_id AND v.is_current ORDER BY 1")
    shown = pg_writer.embed_text
    read: list[str] = []
    monkeypatch.setattr(pg_writer, "embed_text", lambda c: read.append(c.source_path) or shown(c))
    again = build_index(docs, UNUSED, settings, embedder)
    assert read == [] and again.chunks_embedded == 0 and again.chunks_reused == again.chunks_total
    assert run_sql(pg_dsn, "SELECT chunk_id, content_hash, length FROM rag_chunks r JOIN "
                   "rag_versions v ON v.id = r.version_id AND v.is_current ORDER BY 1") == lengths
    # A vector gone from the database is embedded again, though its chunk did not change.
    [(gone,)] = run_sql(pg_dsn, "SELECT content_hash FROM rag_vectors LIMIT 1")
    run_sql(pg_dsn, "DELETE FROM rag_vectors WHERE content_hash = %s", (gone,))
    healed = build_index(docs, UNUSED, settings, embedder)
    assert healed.chunks_embedded == 1 and read  # its chunks only, read again
    assert run_sql(pg_dsn, "SELECT count(*) FROM rag_vectors WHERE content_hash = %s",
                   (gone,)) == [(1,)]
    read.clear()
    # The same sentence under a renamed heading: its chunk id stays, its embedded text not.
    (docs / "faq.md").write_text("# FAQ\n\nTides come twice a day.\n", encoding="utf-8")
    build_index(docs, UNUSED, settings, embedder)
    (docs / "faq.md").write_text("# Tides\n\nTides come twice a day.\n", encoding="utf-8")
    calls = embedder.calls
    renamed = build_index(docs, UNUSED, settings, embedder)
    assert set(read) == {"faq.md"} and embedder.calls - calls == renamed.chunks_embedded == 1
    hits = open_retriever(UNUSED, settings, embedder).search("tides twice a day", k=1)
    assert hits[0].chunk.heading == "Tides"


def test_a_loaded_version_is_pinned_until_the_server_moves_on(docs, pg_dsn, embedder,
                                                              monkeypatch):
    """Readers see the old version or the new one, never a mix; stale() tells them to reload."""
    settings = pg_settings(pg_dsn)
    build_index(docs, UNUSED, settings, embedder)
    old = open_retriever(UNUSED, settings, embedder)
    monkeypatch.setattr(postgres, "STALE_CHECK_S", 0.0)
    assert not old.index.stale()
    (docs / "faq.md").unlink()
    build_index(docs, UNUSED, settings, embedder)
    assert old.index.stale()
    query = "Is Tidewatch free? Apache License"
    pinned = {h.chunk.source_path for h in old.search(query, k=50, mode="lexical")}
    fresh = open_retriever(UNUSED, settings, embedder)
    assert "faq.md" in pinned
    assert "faq.md" not in {h.chunk.source_path for h in fresh.search(query, k=50)}
    assert fresh.index.path.name != old.index.path.name
    current = run_sql(pg_dsn, "SELECT count(*) FROM rag_versions WHERE is_current")
    assert current == [(1,)]


def test_a_reindex_never_waits_on_a_reader_of_an_up_to_date_database(docs, pg_dsn, embedder):
    """Readers lock tables one by one; a re-index that took exclusive locks on several (its
    schema statements, run every time) could deadlock with a server's search."""
    import threading

    import psycopg

    settings = pg_settings(pg_dsn)
    build_index(docs, UNUSED, settings, embedder)
    (docs / "faq.md").write_text("# FAQ\n\nTides come twice a day.\n", encoding="utf-8")
    reports: list = []
    with psycopg.connect(pg_dsn) as reader:  # a search mid-transaction holds its tables
        for table in ("rag_versions", "rag_files", "rag_chunks", "rag_vectors", "rag_terms"):
            reader.execute(f"SELECT count(*) FROM {table}")
        writer = threading.Thread(
            target=lambda: reports.append(build_index(docs, UNUSED, settings, embedder)))
        writer.start()
        writer.join(60)
        finished = not writer.is_alive()
        reader.rollback()
    writer.join(60)
    assert finished, "the re-index waited for the reader's locks"
    assert reports[0].changed == ["faq.md"]


def test_a_search_crossed_by_a_deadlock_is_run_again(docs, pg_dsn, embedder, monkeypatch):
    """PostgreSQL aborts one side of a deadlock; a read changes nothing, so it is retried."""
    import psycopg

    settings = pg_settings(pg_dsn)
    build_index(docs, UNUSED, settings, embedder)
    retriever = open_retriever(UNUSED, settings, embedder)
    pool, failures = retriever.index.pool, []
    real = pool.connection

    @contextlib.contextmanager
    def connection():
        with real() as conn:
            if len(failures) < 2:
                failures.append(1)
                raise psycopg.errors.DeadlockDetected("deadlock detected")
            yield conn

    monkeypatch.setattr(pool, "connection", connection)
    hits = retriever.search(QUERIES[0], k=3, mode="lexical")
    assert len(failures) == 2 and hits and "8080" in hits[0].chunk.text
    failures.clear()
    monkeypatch.setattr(postgres, "RETRIES", 1)  # a deadlock every time: one clear line
    with pytest.raises(RetrievalError, match="index database query failed: deadlock detected"):
        retriever.search("install from source", k=3, mode="lexical")


def test_vectors_copied_from_a_folder_index_are_not_embedded_again(docs, tmp_path, pg_dsn,
                                                                    embedder):
    """Moving a folder index to PostgreSQL (scripts/store_parity.py) copies its vectors into
    an empty database, whose HNSW index is then built; `rag index` embeds nothing after."""
    from rag.indexer.pg_writer import import_vectors
    from rag.stores import folder

    build_index(docs, tmp_path / "index", Settings(), embedder)
    calls = embedder.calls
    copied = import_vectors(pg_settings(pg_dsn), folder.load(tmp_path / "index"))
    assert copied > 0
    assert run_sql(pg_dsn, "SELECT to_regclass('rag_vectors_hnsw') IS NOT NULL") == [(True,)]
    report = build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    assert report.chunks_embedded == 0 and embedder.calls == calls
    hits = open_retriever(UNUSED, pg_settings(pg_dsn), embedder).search(QUERIES[0], k=3)
    assert "8080" in hits[0].chunk.text


def test_second_writer_stops_with_one_line(docs, pg_dsn, embedder):
    import psycopg

    with psycopg.connect(pg_dsn) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (ADVISORY_KEY,))
        with pytest.raises(IndexBusyError, match="is being written by another process"):
            build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    assert build_index(docs, UNUSED, pg_settings(pg_dsn), embedder).chunks_total > 0


# An indexing process killed with SIGKILL just before or just after its version switch.
CRASHING_INDEXER = """
import os, signal, sys
from pathlib import Path
from rag.core.config import Settings
from rag.indexer import pg_writer
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index

switch = pg_writer.switch_version

def crashing_switch(conn, version_id):
    if sys.argv[3] == "pg_after_switch":
        switch(conn, version_id)
    os.kill(os.getpid(), signal.SIGKILL)

pg_writer.switch_version = crashing_switch

settings = Settings()
settings.store.kind = "postgres"
settings.store.dsn = sys.argv[2]
build_index(Path(sys.argv[1]), Path("unused"), settings, FakeEmbedder())
"""


@pytest.mark.parametrize("crash_at", ["pg_before_switch", "pg_after_switch"])
def test_killed_indexer_leaves_a_complete_version(docs, pg_dsn, embedder, crash_at):
    settings = pg_settings(pg_dsn)
    build_index(docs, UNUSED, settings, embedder)
    before = open_retriever(UNUSED, settings, embedder).index.path.name
    (docs / "added.md").write_text("# Added\n\nA brand new page about tides.\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CRASHING_INDEXER, str(docs), pg_dsn, crash_at],
                          check=False, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    after = open_retriever(UNUSED, settings, embedder)
    paths = {h.chunk.source_path for h in after.search("brand new page about tides", k=50)}
    if crash_at == "pg_before_switch":
        assert after.index.path.name == before and "added.md" not in paths
    else:
        assert after.index.path.name != before and "added.md" in paths
    # The vectors the killed run embedded were committed: the next run reuses them.
    report = build_index(docs, UNUSED, settings, embedder)
    assert report.chunks_embedded == 0
    assert "added.md" in {h.chunk.source_path
                          for h in open_retriever(UNUSED, settings, embedder).search(
                              "brand new page about tides", k=50)}


def test_rebuild_re_embeds_everything_and_a_changed_model_asks_for_it(docs, pg_dsn, embedder):
    from rag.indexer.embedding import FakeEmbedder

    settings = pg_settings(pg_dsn)
    first = build_index(docs, UNUSED, settings, embedder)
    other = FakeEmbedder(name="another-model")
    with pytest.raises(IndexingError, match="embedding_model .*rebuild with `rag index --rebuild`"):
        build_index(docs, UNUSED, settings, other)
    rebuilt = build_index(docs, UNUSED, settings, other, rebuild=True)
    assert rebuilt.chunks_embedded == other.calls > 0 and rebuilt.chunks_reused == 0
    assert rebuilt.chunks_total == first.chunks_total
    hits = open_retriever(UNUSED, settings, other).search("admin token", k=3)
    assert hits and open_retriever(UNUSED, settings, other).index.manifest.embedding_model == (
        "another-model")
