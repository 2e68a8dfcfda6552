"""Retriever: fusion, modes, k; and real questions over the FastAPI docs with the real model."""

from __future__ import annotations

import numpy as np
import pytest

from rag.core.config import ChunkingSettings, RetrievalSettings, Settings
from rag.core.errors import IndexingError, RetrievalError
from rag.core.records import Chunk
from rag.core.text import index_terms
from rag.indexer.indexing import build_index
from rag.retriever.retrieval import Retriever, _Filter, fuse, fuse_scores, fuse_weighted
from rag.stores import folder as store
from rag.stores.lexical import LexicalIndex
from tests.conftest import corpus_dir


def test_fuse_rewards_agreement_and_is_deterministic():
    dense = [(1, 0.9), (2, 0.8), (3, 0.7)]
    lexical = [(3, 9.0), (4, 8.0), (1, 7.0)]
    fused = fuse([dense, lexical], rrf_k=60)
    assert [row for row, _ in fused][:2] == [1, 3]  # in both lists beats first in one
    assert {row for row, _ in fused} == {1, 2, 3, 4}
    assert fuse([dense, lexical], rrf_k=60) == fused


def test_weights_move_the_fused_order():
    dense = [(1, 0.9), (2, 0.5)]
    lexical = [(2, 12.0), (1, 1.0)]
    only_dense = RetrievalSettings(fusion="rrf", dense_weight=1.0)
    only_lexical = RetrievalSettings(fusion="convex", dense_weight=0.0)
    assert next(r for r, _ in fuse_weighted(dense, lexical, only_dense)) == 1
    assert next(r for r, _ in fuse_weighted(dense, lexical, only_lexical)) == 2
    # equal weights give plain RRF's scores
    assert fuse_weighted(dense, lexical, RetrievalSettings(fusion="rrf")) == fuse(
        [dense, lexical], 60)


def test_convex_fusion_normalises_each_ranking():
    # BM25 scores are ten times larger, but after min-max scaling the margins decide:
    # row 1 is far ahead in dense, row 2 only a little ahead in lexical.
    dense = [(1, 0.9), (2, 0.1), (3, 0.0)]
    lexical = [(2, 20.0), (1, 19.0), (3, 0.0)]
    fused = fuse_scores([dense, lexical], [0.5, 0.5])
    assert [row for row, _ in fused] == [1, 2, 3]
    assert fused[0][1] == pytest.approx(0.5 * 1.0 + 0.5 * 0.95)


@pytest.fixture
def retriever(docs, tmp_path, settings, embedder) -> Retriever:
    build_index(docs, tmp_path / "index", settings, embedder)
    return Retriever(store.load(tmp_path / "index"), embedder, settings.retrieval)


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_modes_rank_hits_with_exact_lines(retriever, docs, mode):
    hits = retriever.search("which port does the server listen on", mode=mode, k=4)
    assert 0 < len(hits) <= 4
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for hit in hits:
        text = (docs / hit.chunk.source_path).read_bytes().decode("utf-8-sig")
        lines = text.replace("\r\n", "\n").split("\n")
        assert "\n".join(lines[hit.chunk.start_line - 1:hit.chunk.end_line]) == hit.chunk.text
    assert any(h.chunk.source_path == "server-ports.md" for h in hits)


def test_k_and_bad_queries(retriever):
    assert len(retriever.search("tidewatch", k=2)) == 2
    with pytest.raises(RetrievalError, match="empty"):
        retriever.search("   ")
    with pytest.raises(RetrievalError, match="unknown search mode"):
        retriever.search("port", mode="semantic")
    # a query with no known word still gets dense hits, and no lexical ones
    assert retriever.search("zzzqqq", mode="lexical") == []
    assert retriever.search("zzzqqq", mode="dense")


# Questions a FastAPI user asks, each answered in one known file.
FASTAPI_QUESTIONS = {
    "how do I declare a path parameter": "tutorial/path-params.md",
    "make a query parameter optional with a default value": "tutorial/query-params.md",
    "allow requests from a frontend on another origin": "tutorial/cors.md",
    "serve static files like images and css from a directory": "tutorial/static-files.md",
    "upload a file with UploadFile": "tutorial/request-files.md",
    "test my app with TestClient": "tutorial/testing.md",
    "run a task after returning a response": "tutorial/background-tasks.md",
    "read a cookie value in a path operation": "tutorial/cookie-params.md",
    "raise an HTTPException with a 404 status": "tutorial/handling-errors.md",
    "build a Docker image for my FastAPI app": "deployment/docker.md",
    "accept a websocket connection": "advanced/websockets.md",
    "set the status code of the response": "tutorial/response-status-code.md",
}


@pytest.mark.slow
def test_fastapi_questions_find_their_file_in_the_top_5(tmp_path_factory, remembered_vectors):
    """Real model, hybrid mode, over the FastAPI tutorial, advanced and deployment pages."""
    from rag.core.config import Settings
    from rag.indexer.embedding import make_embedder

    source = corpus_dir("fastapi")
    docs = tmp_path_factory.mktemp("fastapi")
    wanted = set(FASTAPI_QUESTIONS.values())
    others = sorted(p.relative_to(source).as_posix() for p in (source / "tutorial").glob("*.md"))
    for rel in sorted(wanted | set(others[:30])):
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_bytes((source / rel).read_bytes())
    settings = Settings()
    embedder = make_embedder(settings.embedding)
    index = tmp_path_factory.mktemp("index") / "fastapi"
    build_index(docs, index, settings, embedder)
    retriever = Retriever(store.load(index), embedder, RetrievalSettings(mode="hybrid"))
    misses = []
    for question, expected in FASTAPI_QUESTIONS.items():
        top = [h.chunk.source_path for h in retriever.search(question, k=5)]
        if expected not in top:
            misses.append((question, expected, top))
    assert not misses


def test_lexical_scores_equal_bm25s(tmp_path):
    """BM25 is computed at query time from saved term counts; the scores are bm25s's own,
    to the bit, and survive a save and load."""
    bm25s = pytest.importorskip("bm25s", reason="pip install -e '.[dev]'")
    texts = ["the server listens on port 8080", "ports and sockets", "install with pip",
             "port forwarding for the server", "nothing relevant here", ""]
    LexicalIndex.build(texts).save(tmp_path / "lex")
    ours = LexicalIndex.load(tmp_path / "lex")
    theirs = bm25s.BM25()
    theirs.index([index_terms(t) or ["\x00empty"] for t in texts], show_progress=False)
    for query in ["server port", "install", "sockets port port", "unknownword"]:
        words = [w for w in index_terms(query) if w in theirs.vocab_dict]
        expected = theirs.get_scores(words) if words else np.zeros(len(texts))
        assert np.array_equal(ours.scores(index_terms(query)), expected.astype(np.float32))
    mask = np.array([0, 1, 1, 1, 1, 1], dtype=bool)
    assert [row for row, _ in ours.search("server port", 5, mask)] == [3, 1]


def test_bm25_stems_and_splits_identifiers():
    assert index_terms("Running the pumps") == index_terms("run pump")
    assert "token" in index_terms("set max_tokens")  # the identifier's parts count too
    index = LexicalIndex.build(["the pump is running", "configure max_tokens here",
                                "nothing relevant"])
    assert [row for row, _ in index.search("runs pumps", 3)] == [0]
    assert [row for row, _ in index.search("tokens", 3)] == [1]


def _chunk(row: int, text: str, heading: str | None) -> Chunk:
    return Chunk(f"{row:016x}", "s", "a.md", text, row + 1, row + 1, heading)


def test_heading_words_are_searchable_and_can_weigh_more():
    chunks = [_chunk(0, "maintenance schedule for the intake valves", None),
              _chunk(1, "the glacier intake valves schedule", None),
              _chunk(2, "maintenance schedule for the intake valves", "Glacier")]
    once = LexicalIndex.from_chunks(chunks, heading_weight=1)
    assert {row for row, _ in once.search("glacier", 3)} == {1, 2}
    twice = LexicalIndex.from_chunks(chunks, heading_weight=2)
    assert [row for row, _ in twice.search("glacier", 3)] == [2, 1]


def test_an_index_from_another_analyzer_asks_for_reindexing(tmp_path):
    LexicalIndex.build(["some text"]).save(tmp_path / "v" / "lexical")
    meta = tmp_path / "v" / "lexical" / "lexical.json"
    meta.write_text('{"size": 1}')
    with pytest.raises(IndexingError, match="run `rag index`"):
        LexicalIndex.load(tmp_path / "v" / "lexical")


PUMPS = """# Guide

## Glacier pumps

Glacier pumps move meltwater uphill. Each pump has a pressure gauge and a
relief valve that opens when the pressure rises above the limit.
\t
Pressure drops when a glacier pump runs dry; the gauge then reads zero and
the relief valve closes again until the meltwater returns.

Restart a glacier pump by priming it with water, then watch the pressure
gauge climb back into the green band before opening the outlet.

## Weather

Snow and wind reports come from the ridge station every hour.
"""


@pytest.fixture
def pumps(tmp_path, embedder):
    """An index of one file whose 'Glacier pumps' section is three chunks."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pumps.md").write_text(PUMPS)
    settings = Settings(chunking=ChunkingSettings(max_tokens=30, min_tokens=0))
    build_index(docs, tmp_path / "index", settings, embedder)
    version = store.load(tmp_path / "index")
    section = [c for c in version.chunks if c.heading == "Guide > Glacier pumps"]
    assert len(section) == 3  # the fixture is what the tests below rely on
    return docs, version, embedder


def _file_lines(docs, hit):
    lines = (docs / hit.chunk.source_path).read_text().split("\n")
    return "\n".join(lines[hit.chunk.start_line - 1:hit.chunk.end_line])


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_adjacent_chunks_of_a_section_merge_into_one_place(pumps, limit):
    docs, version, embedder = pumps
    retriever = Retriever(version, embedder, RetrievalSettings(section_chunks=limit))
    hits = retriever.search("glacier pump pressure gauge relief valve", mode="lexical", k=3)
    ids = {c.chunk_id for c in version.chunks}
    places = [(h.chunk.source_path, h.chunk.heading) for h in hits]
    pump_hits = [h for h in hits if h.chunk.heading == "Guide > Glacier pumps"]
    # the section is one place when it fits the limit, otherwise pieces of at most `limit`
    assert len(pump_hits) == -(-3 // limit)
    assert len(places) == len(hits)
    for hit in hits:
        assert hit.chunk.text == _file_lines(docs, hit)  # the contract's invariant
        assert hit.chunk.chunk_id in ids  # a real chunk of the index...
        assert hit.chunk.chunk_id in hit.to_dict()["chunk_ids"]  # ...inside the hit
        assert set(hit.to_dict()["chunk_ids"]) <= ids
        assert len(hit.to_dict()["chunk_ids"]) <= limit
    if limit == 3:
        top = pump_hits[0]
        assert "\t" in top.chunk.text  # the whitespace-only line between chunks, as in the file
        assert (top.chunk.start_line, top.chunk.end_line) == (3, 12)


def test_a_changed_file_leaves_its_chunks_unmerged(pumps):
    docs, version, embedder = pumps
    # the middle chunk changes: no merged range would match the file any more
    (docs / "pumps.md").write_text(PUMPS.replace("runs dry", "is running dry"))
    retriever = Retriever(version, embedder, RetrievalSettings(section_chunks=3))
    hits = retriever.search("glacier pump pressure gauge", mode="lexical", k=3)
    assert hits and all(len(h.to_dict()["chunk_ids"]) == 1 for h in hits)
    assert {h.chunk.text for h in hits} <= {c.text for c in version.chunks}


def test_a_chunk_the_user_may_not_see_is_never_merged_in(pumps):
    _docs, version, embedder = pumps
    retriever = Retriever(version, embedder, RetrievalSettings(section_chunks=3))
    rows = [i for i, c in enumerate(version.chunks) if c.heading == "Guide > Glacier pumps"]
    mask = np.ones(len(version.chunks), dtype=np.float32)
    mask[rows[1]] = 0  # the middle chunk is hidden from this user
    filt = _Filter(mask, None, len(version.chunks) - 1)
    hits = retriever.places([(rows[0], 1.0), (rows[2], 0.9)], 5, filt)
    assert [h.to_dict()["chunk_ids"] for h in hits] == [
        [version.chunks[rows[0]].chunk_id], [version.chunks[rows[2]].chunk_id]]
    everyone = retriever.places([(rows[0], 1.0), (rows[2], 0.9)], 5,
                                retriever.filter_for(frozenset()))
    assert len(everyone) == 1 and len(everyone[0].chunk_ids) == 3


def test_a_hit_reads_on_into_the_next_chunk_of_its_section_and_no_further(pumps):
    docs, version, embedder = pumps
    retriever = Retriever(version, embedder, RetrievalSettings(section_chunks=1))
    rows = [i for i, c in enumerate(version.chunks) if c.heading == "Guide > Glacier pumps"]
    first = retriever.places([(rows[0], 1.0)], 1, retriever.filter_for(frozenset()))[0]
    longer = retriever.read_on(first)
    assert longer is not None
    assert list(longer.chunk_ids) == [version.chunks[r].chunk_id for r in rows[:2]]
    assert longer.chunk.chunk_id == first.chunk.chunk_id and longer.rank == first.rank
    assert (longer.chunk.start_line, longer.chunk.end_line) == (
        first.chunk.start_line, version.chunks[rows[1]].end_line)
    assert longer.chunk.text == _file_lines(docs, longer)
    whole = retriever.read_on(longer)
    assert whole is not None and len(whole.chunk_ids) == 3
    assert retriever.read_on(whole) is None  # the section ends there: "Weather" is not read
    (docs / "pumps.md").write_text(PUMPS.replace("runs dry", "is running dry"))
    assert Retriever(version, embedder, RetrievalSettings()).read_on(first) is None


def test_a_hit_never_reads_on_into_a_chunk_the_user_may_not_see(pumps):
    from dataclasses import replace

    _docs, version, embedder = pumps
    rows = [i for i, c in enumerate(version.chunks) if c.heading == "Guide > Glacier pumps"]
    version.chunks[rows[1]] = replace(version.chunks[rows[1]], visibility=("staff",))
    retriever = Retriever(version, embedder, RetrievalSettings(section_chunks=1))
    first = retriever.places([(rows[0], 1.0)], 1, retriever.filter_for(frozenset()))[0]
    assert retriever.read_on(first) is None
    assert retriever.read_on(first, frozenset({"guests"})) is None
    staff = retriever.read_on(first, frozenset({"staff"}))
    assert staff is not None and len(staff.chunk_ids) == 2
