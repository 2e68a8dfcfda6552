"""The PostgreSQL store against a real PostgreSQL + pgvector (pgserver), fake embedder: searches
as the folder store's, visibility and row-level security, databases from before. Writing it
(re-index, versions, locks, a killed indexer) is tested in tests/test_postgres_indexing.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.errors import IndexingError
from rag.core.records import SearchHit
from rag.indexer.indexing import build_index
from rag.pipeline import open_retriever
from rag.stores import postgres
from tests.pg_server import reader_role, with_database

QUERIES = ("Which port does the HTTP API listen on by default?",
           "How is the admin token rotated?", "install from source", "retention period",
           "port already in use", "staff runbook")
GROUPS = (frozenset(), frozenset({"staff"}))
UNUSED = Path("unused-by-the-postgres-store")


def pg_settings(dsn: str) -> Settings:
    settings = Settings()
    settings.store.kind = "postgres"
    settings.store.dsn = dsn
    return settings


def run_sql(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_both_stores_rank_alike(docs, tmp_path, pg_dsn, embedder, kind):
    """Same chunks, same BM25 scores, same dense scores, same visibility."""
    folder_settings, database_settings = Settings(), pg_settings(pg_dsn)
    folder_settings.index.kind = database_settings.index.kind = kind
    build_index(docs, tmp_path / "index", folder_settings, embedder)
    build_index(docs, UNUSED, database_settings, embedder)
    folder = open_retriever(tmp_path / "index", folder_settings, embedder)
    database = open_retriever(UNUSED, database_settings, embedder)
    assert len(database.index.chunks) == len(folder.index.chunks)
    for query in QUERIES:
        for groups in GROUPS:
            for mode in ("dense", "lexical"):
                want = folder.search(query, mode=mode, groups=groups, k=5)
                got = database.search(query, mode=mode, groups=groups, k=5)
                assert [round(h.score, 4) for h in got] == [round(h.score, 4) for h in want]
                if mode == "lexical":  # no ties among BM25 scores here: same order
                    assert [h.chunk for h in got] == [h.chunk for h in want]
                else:
                    assert got[0].chunk == want[0].chunk


def test_restricted_chunks_only_reach_their_groups(docs, pg_dsn, embedder):
    build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    retriever = open_retriever(UNUSED, pg_settings(pg_dsn), embedder)
    query = "staff runbook admin token rotation"
    public = retriever.search(query, k=50, mode="hybrid")
    staff = retriever.search(query, k=50, mode="hybrid", groups={"staff"})
    assert public and all(not h.chunk.visibility for h in public)
    assert any(h.chunk.source_path == "staff/runbook.md" for h in staff)
    assert len(staff) > len(public)


def test_row_level_security_hides_restricted_rows_from_a_reader_role(docs, pg_dsn, embedder):
    """Even a query without the visibility filter sees only what rag.groups allows."""
    build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    reader = reader_role(pg_dsn)
    total = run_sql(pg_dsn, "SELECT count(*) FROM rag_chunks")[0][0]
    staff_rows = run_sql(pg_dsn, "SELECT count(*) FROM rag_chunks WHERE 'staff' = ANY(visibility)")
    assert staff_rows[0][0] > 0
    seen = run_sql(reader, "SELECT count(*) FROM rag_chunks")[0][0]
    assert seen == total - staff_rows[0][0]
    import psycopg

    with psycopg.connect(reader) as conn:
        conn.execute("SELECT set_config('rag.groups', 'ops,staff', true)")
        assert conn.execute("SELECT count(*) FROM rag_chunks").fetchone()[0] == total
    # The reader role serves searches as usual.
    hits = open_retriever(UNUSED, pg_settings(reader), embedder).search(
        "admin token", groups={"staff"}, k=50)
    assert any(h.chunk.source_path == "staff/runbook.md" for h in hits)


# Every table the store keeps, as text: what a reader role could read from each.
DUMP = "SELECT coalesce(string_agg(r::text, ' '), '') FROM {table} r"


def test_a_reader_role_sees_no_restricted_text_word_or_path(docs, pg_dsn, embedder):
    """Row-level security covers every table that holds text, words or paths: with no groups,
    a reader role reads no chunk of the staff runbook, no word that only the runbook uses and
    not its path (the manifest keeps no paths; rag_files is filtered); with the group it
    reads them all, and search finds the runbook."""
    # A restricted file that gives no chunks: its path is guarded by its own rule.
    (docs / "staff" / "later.md").write_text("---\nvisibility: [staff]\n---\n",
                                             encoding="utf-8")
    build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    reader = reader_role(pg_dsn)
    tables = [r[0] for r in run_sql(pg_dsn, "SELECT tablename FROM pg_tables "
                                            "WHERE schemaname = 'public'")]
    assert "rag_df" not in tables and "rag_files" in tables
    tables.remove("rag_vectors")  # vectors keyed by text hash: no text, word or path
    staff_hashes = [r[0] for r in run_sql(
        pg_dsn, "SELECT DISTINCT content_hash FROM rag_chunks WHERE visibility <> '{}' AND "
                "content_hash NOT IN (SELECT content_hash FROM rag_chunks WHERE visibility = '{}')")]
    staff_words = {r[0] for r in run_sql(
        pg_dsn, "SELECT term FROM rag_terms WHERE content_hash = ANY(%s) EXCEPT SELECT term "
                "FROM rag_terms WHERE content_hash <> ALL(%s)", (staff_hashes, staff_hashes))}
    assert staff_hashes and {"drain", "systemctl"} <= staff_words

    def readable(dsn: str, groups: str) -> str:
        import psycopg

        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT set_config('rag.groups', %s, true)", (groups,))
            return " ".join(conn.execute(DUMP.format(table=t)).fetchone()[0] for t in tables)

    outsider = readable(reader, "")
    assert "staff/runbook.md" not in outsider and "On-call runbook" not in outsider
    assert "staff/later.md" not in outsider
    assert not any(h in outsider for h in staff_hashes)  # no term or chunk row of it
    words = {r[0] for r in run_sql(reader, "SELECT term FROM rag_terms")}
    assert words and not words & staff_words
    insider = readable(reader, "staff")
    assert "staff/runbook.md" in insider and all(h in insider for h in staff_hashes)
    assert "staff/later.md" in insider
    hits = open_retriever(UNUSED, pg_settings(reader), embedder).search(
        "drain systemctl", groups={"staff"}, k=5, mode="lexical")
    assert hits[0].chunk.source_path == "staff/runbook.md"
    assert not open_retriever(UNUSED, pg_settings(reader), embedder).search(
        "drain systemctl", k=5, mode="lexical")


def test_a_database_from_before_keeps_no_paths_or_word_counts_readable(docs, pg_dsn,
                                                                       embedder):
    """A database an earlier version wrote (file paths in each manifest, word counts over
    every chunk in rag_df) is brought up to date by the next `rag index`, which still reuses
    what it indexed before; after it no manifest holds a path and the counts are gone."""
    settings = pg_settings(pg_dsn)
    build_index(docs, UNUSED, settings, embedder)
    run_sql(pg_dsn, "UPDATE rag_versions v SET manifest = manifest || jsonb_build_object("
                    "'files', (SELECT jsonb_object_agg(path, jsonb_build_object('source_id', "
                    "source_id, 'content_hash', content_hash, 'chunk_ids', to_jsonb(chunk_ids), "
                    "'visibility', to_jsonb(front_matter))) FROM rag_files f "
                    "WHERE f.version_id = v.id))")
    run_sql(pg_dsn, "DELETE FROM rag_files")
    run_sql(pg_dsn, "CREATE TABLE rag_df (version_id bigint, term text, df integer)")
    run_sql(pg_dsn, "ALTER TABLE rag_versions ADD COLUMN avg_len double precision")
    run_sql(pg_dsn, "COMMENT ON TABLE rag_versions IS NULL")  # no schema mark back then
    assert run_sql(pg_dsn, "SELECT count(*) FROM rag_versions WHERE manifest ? 'files'") == [(1,)]
    with open(docs / "install.md", "a", encoding="utf-8") as fh:
        fh.write("\nOne more line about installing.\n")
    report = build_index(docs, UNUSED, settings, embedder)
    assert report.changed == ["install.md"] and not report.added and len(report.unchanged) > 3
    assert run_sql(pg_dsn, "SELECT count(*) FROM rag_versions WHERE manifest ? 'files'") == [(0,)]
    assert run_sql(pg_dsn, "SELECT to_regclass('rag_df') IS NULL") == [(True,)]
    paths = {r[0] for r in run_sql(pg_dsn, "SELECT path FROM rag_files f JOIN rag_versions v "
                                           "ON v.id = f.version_id WHERE v.is_current")}
    assert {"install.md", "staff/runbook.md"} <= paths


def test_missing_index_or_database_is_one_clear_line(pg_dsn, pg_server, embedder):
    with pytest.raises(IndexingError, match="no index in PostgreSQL .*RAG_STORE__KIND=postgres"):
        open_retriever(UNUSED, pg_settings(pg_dsn), embedder)
    missing = with_database(pg_server, "no_such_database")
    with pytest.raises(IndexingError, match="cannot connect to PostgreSQL"):
        open_retriever(UNUSED, pg_settings(missing), embedder)
    with pytest.raises(IndexingError, match="store.dsn is empty"):
        open_retriever(UNUSED, pg_settings(""), embedder)


def test_hnsw_still_returns_k_visible_hits_when_the_nearest_are_hidden(docs, tmp_path, pg_dsn,
                                                                       embedder):
    """Candidates the visibility filter drops are made up for by an exact scan."""
    folder_settings, database_settings = Settings(), pg_settings(pg_dsn)
    database_settings.index.kind = "hnsw"
    database_settings.index.hnsw_ef_search = 8  # as few candidates as k
    build_index(docs, tmp_path / "index", folder_settings, embedder)
    build_index(docs, UNUSED, database_settings, embedder)
    folder = open_retriever(tmp_path / "index", folder_settings, embedder)
    database = open_retriever(UNUSED, database_settings, embedder)
    query = "staff runbook: rotate the admin token"
    nearest = database.search(query, mode="dense", k=8, groups={"staff"})
    assert any(h.chunk.visibility for h in nearest)  # restricted chunks are among the nearest
    got = database.search(query, mode="dense", k=8)
    want = folder.search(query, mode="dense", k=8)
    assert len(got) == 8 and not any(h.chunk.visibility for h in got)
    assert [round(h.score, 4) for h in got] == [round(h.score, 4) for h in want]


def test_listing_every_chunk_is_refused_not_partial(docs, pg_dsn, embedder):
    build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    index = open_retriever(UNUSED, pg_settings(pg_dsn), embedder).index
    assert len(index.chunks) > 0
    with pytest.raises(IndexingError, match="through its searches only"):
        list(index.chunks)


def test_pieces_of_a_long_line_keep_their_columns(docs, tmp_path, pg_dsn, embedder):
    """A paragraph on one long line is indexed as pieces of that line; the team store must
    hand back the same pieces, columns included, or every citation of them reads as a file
    that changed since indexing."""
    from rag.verifier.verification import quote_lines

    sentence = "The pelican harbour gate opens at dawn for the fishing boats of the bay. "
    (docs / "long.md").write_text("# Harbour\n\n" + sentence * 60 + "\n", encoding="utf-8")
    folder_settings, database_settings = Settings(), pg_settings(pg_dsn)
    build_index(docs, tmp_path / "index", folder_settings, embedder)
    build_index(docs, UNUSED, database_settings, embedder)
    folder = open_retriever(tmp_path / "index", folder_settings, embedder)
    database = open_retriever(UNUSED, database_settings, embedder)
    pieces = [c for c in folder.index.chunks if c.source_path == "long.md" and c.start_col is not None]
    assert len(pieces) > 1  # the line really was split
    want = folder.search("pelican harbour gate dawn", mode="lexical", k=3)
    got = database.search("pelican harbour gate dawn", mode="lexical", k=3)
    assert [h.chunk for h in got] == [h.chunk for h in want]
    for hit in got:
        c = hit.chunk
        _, problem = quote_lines(docs, c.source_path, c.start_line, c.end_line, c.text,
                                 cols=(c.start_col, c.end_col))
        assert problem is None
    # Re-indexing reads the stored version back: nothing is re-embedded for the pieces.
    assert build_index(docs, UNUSED, database_settings, embedder).chunks_embedded == 0


def test_visible_counts_stay_bounded_over_many_group_sets(docs, pg_dsn, embedder):
    """A server sees as many group sets as it has users: the counts kept per set are an LRU."""
    build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    retriever = open_retriever(UNUSED, pg_settings(pg_dsn), embedder)
    index = retriever.index
    public, staff = index.visible_count(frozenset()), index.visible_count(frozenset({"staff"}))
    assert 0 < public < staff
    for n in range(3 * postgres.COUNT_CACHE):
        hits = retriever.search("staff runbook", k=3, mode="lexical",
                                groups=frozenset({f"user-{n}"}))
        assert all(not h.chunk.visibility for h in hits)
        assert len(index._counts) <= postgres.COUNT_CACHE
    assert len(index._counts) == postgres.COUNT_CACHE
    assert frozenset({"staff"}) not in index._counts  # the oldest sets went first
    assert index.visible_count(frozenset({"staff"})) == staff  # and are counted again
    assert index.visible_count(frozenset()) == public


def test_chunks_keep_their_reader_and_a_database_from_before_still_answers(docs, pg_dsn,
                                                                           embedder):
    """Each chunk's reader is stored; a database written before that column existed still
    answers (its chunks read by the old rule), and the next `rag index` adds the column and
    records the readers without calling any file changed."""
    from rag.pipeline import Pipeline

    (docs / "options.txt").write_text("Kiln options\n============\n\nglaze\n    The glaze "
                                      "fires at 1240 degrees.\n", encoding="utf-8")
    (docs / "conf.py").write_text("source_suffix = ['.rst', '.txt']\n", encoding="utf-8")
    settings = pg_settings(pg_dsn)
    first = build_index(docs, UNUSED, settings, embedder)
    assert run_sql(pg_dsn, "SELECT DISTINCT format FROM rag_chunks "
                           "WHERE source_path = 'options.txt'") == [("rst",)]
    hits = open_retriever(UNUSED, settings, embedder).search("kiln glaze degrees", k=3)
    assert hits[0].chunk.source_path == "options.txt" and hits[0].chunk.format == "rst"

    run_sql(pg_dsn, "ALTER TABLE rag_chunks DROP COLUMN format")
    run_sql(pg_dsn, "COMMENT ON TABLE rag_versions IS NULL")  # no schema mark back then
    retriever = open_retriever(UNUSED, settings, embedder)
    with Pipeline(UNUSED, settings, generator="extractive", retriever=retriever) as pipeline:
        answer = pipeline.ask(QUERIES[0])
    assert "8080" in answer.answer and answer.citations
    assert {e.chunk.format for e in answer.evidence} == {None}

    again = build_index(docs, UNUSED, settings, embedder)
    assert not again.changed and sorted(again.unchanged) == sorted(first.added)
    assert run_sql(pg_dsn, "SELECT DISTINCT format FROM rag_chunks c JOIN rag_versions v "
                           "ON v.id = c.version_id WHERE v.is_current "
                           "AND source_path = 'options.txt'") == [("rst",)]




def test_a_section_merges_and_reads_on_as_in_the_folder_store(tmp_path, pg_dsn, embedder):
    """A hit is a place in the team store too: two chunks of one section that rank merge
    with the chunk between them, and a hit reads on into its section's next chunk, though
    no search returned that chunk. The server's evidence, and so its answers, are the
    folder index's."""
    from rag.core.config import ChunkingSettings
    from tests.test_retrieval import PUMPS

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pumps.md").write_text(PUMPS, encoding="utf-8")
    folder_settings, database_settings = Settings(), pg_settings(pg_dsn)
    for settings in (folder_settings, database_settings):
        settings.chunking = ChunkingSettings(max_tokens=30, min_tokens=0)
        settings.retrieval.section_chunks = 3
    build_index(docs, tmp_path / "index", folder_settings, embedder)
    build_index(docs, UNUSED, database_settings, embedder)
    folder = open_retriever(tmp_path / "index", folder_settings, embedder)
    database = open_retriever(UNUSED, database_settings, embedder)
    section = [c for c in folder.index.chunks if c.heading == "Guide > Glacier pumps"]
    assert len(section) == 3

    # The first and last chunks hold these words, the middle one none of them.
    want = folder.search("uphill limit priming outlet", mode="lexical", k=3)
    got = database.search("uphill limit priming outlet", mode="lexical", k=3)
    assert [_place(h) for h in got] == [_place(h) for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6)
    assert list(got[0].chunk_ids) == [c.chunk_id for c in section]

    first = database.search("uphill", mode="lexical", k=1)[0]
    assert first.chunk == section[0]
    longer = database.read_on(first)
    assert longer is not None
    assert _place(longer) == _place(folder.read_on(folder.search("uphill", mode="lexical",
                                                                 k=1)[0]))
    assert list(longer.chunk_ids) == [c.chunk_id for c in section[:2]]


def _place(hit: SearchHit | None) -> dict[str, object]:
    """What a hit shows, its score aside (the database sums BM25 in float8 in its own order)."""
    assert hit is not None
    return {k: v for k, v in hit.to_dict().items() if k != "score"}


def test_the_tools_that_name_files_work_on_the_team_store(docs, tmp_path, pg_dsn, embedder):
    """list_sources, read_lines (MCP) and POST /verify name files rather than search: on the
    database store, served as a reader role, they see the files the asker's groups may see,
    as a folder index shows them, and a restricted file stays missing for everyone else."""
    from rag.core.errors import RagError
    from rag.interfaces.mcp_server import DocsTools
    from rag.pipeline import Pipeline
    from rag.verifier.reverify import VerifyRequest, answer_json, verify_payload

    build_index(docs, UNUSED, pg_settings(pg_dsn), embedder)
    build_index(docs, tmp_path / "index", Settings(), embedder)
    settings = pg_settings(reader_role(pg_dsn))
    retriever = open_retriever(UNUSED, settings, embedder)
    with Pipeline(UNUSED, settings, generator="extractive", retriever=retriever) as pipeline, \
            Pipeline(tmp_path / "index", Settings(), generator="extractive",
                     retriever=open_retriever(tmp_path / "index", Settings(), embedder)) as laptop:
        outsider = DocsTools(pipeline, docs, settings, frozenset())
        staff = DocsTools(pipeline, docs, settings, frozenset({"staff"}))
        for groups, tools in ((frozenset(), outsider), (frozenset({"staff"}), staff)):
            folder = DocsTools(laptop, docs, Settings(), groups)
            assert tools.list_sources()["sources"] == folder.list_sources()["sources"]
        listed = {s["source_path"] for s in outsider.list_sources()["sources"]}
        assert "server-ports.md" in listed and "staff/runbook.md" not in listed
        assert "staff/runbook.md" in {s["source_path"] for s in staff.list_sources()["sources"]}
        with pytest.raises(RagError, match="no source"):
            outsider.read_lines("staff/runbook.md", 1, 3)
        assert staff.read_lines("staff/runbook.md", 1, 3)["lines"]

        ask = outsider.ask_docs(QUERIES[0])
        cited = ask["citations"][0]
        read = outsider.read_lines(cited["source_path"], cited["start_line"], cited["end_line"])
        assert [line["text"] for line in read["lines"]] == cited["text"].split("\n")
        assert not read["changed_since_indexed"]

        def verified(question: str, groups: list[str], by: list[str]) -> bool:
            saved = answer_json(pipeline.ask(question, groups=groups), docs)
            assert saved["citations"]
            request = VerifyRequest(answer=saved, groups=by)
            return bool(verify_payload(request, docs, retriever.index, settings)["all_exact"])

        assert verified(QUERIES[0], [], [])
        assert verified("How is the admin token rotated?", ["staff"], ["staff"])
        assert not verified("How is the admin token rotated?", ["staff"], [])
