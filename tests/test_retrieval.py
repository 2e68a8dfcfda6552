"""Retriever: fusion, modes, k; and real questions over the FastAPI docs with the real model."""

from __future__ import annotations

import pytest

from rag import store
from rag.config import RetrievalSettings
from rag.errors import RetrievalError
from rag.indexing import build_index
from rag.retrieval import Retriever, fuse
from tests.conftest import corpus_dir


def test_fuse_rewards_agreement_and_is_deterministic():
    dense = [(1, 0.9), (2, 0.8), (3, 0.7)]
    lexical = [(3, 9.0), (4, 8.0), (1, 7.0)]
    fused = fuse([dense, lexical], rrf_k=60)
    assert [row for row, _ in fused][:2] == [1, 3]  # in both lists beats first in one
    assert {row for row, _ in fused} == {1, 2, 3, 4}
    assert fuse([dense, lexical], rrf_k=60) == fused


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
def test_fastapi_questions_find_their_file_in_the_top_5(tmp_path_factory):
    """Real model, hybrid mode, over the FastAPI tutorial, advanced and deployment pages."""
    from rag.config import Settings
    from rag.embedding import make_embedder

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
    """Queries read bm25s's saved arrays with numpy; the scores must be bm25s's own."""
    import bm25s
    import numpy as np

    from rag.lexical import LexicalIndex, tokenize

    texts = ["the server listens on port 8080", "ports and sockets", "install with pip",
             "port forwarding for the server", "nothing relevant here"]
    LexicalIndex.build(texts).save(tmp_path / "lex")
    ours = LexicalIndex.load(tmp_path / "lex")
    theirs = bm25s.BM25.load(str(tmp_path / "lex"))
    for query in ["server port", "install", "sockets port port", "unknownword"]:
        words = [w for w in tokenize(query) if w in theirs.vocab_dict]
        expected = theirs.get_scores(words) if words else np.zeros(len(texts))
        assert np.allclose(ours.scores(tokenize(query)), expected)
    mask = np.array([0, 1, 1, 1, 1], dtype=np.float32)
    assert [row for row, _ in ours.search("server port", 5, mask)] == [3, 1]
