"""BM25's statistics are those of the chunks the asker may see, in both stores: a public
hit's score, its rank and the abstention check's word counts are the same whether or not
restricted chunks share its words, so none of them tells an outsider about restricted text."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.text import index_terms as tokenize
from rag.indexer.embedding import Embedder
from rag.indexer.indexing import build_index
from rag.pipeline import open_retriever
from rag.retriever.retrieval import Retriever

PUBLIC = {
    "guide/pumps.md": "# Pumps\n\nGlacier pumps move meltwater uphill through the intake.\n",
    "guide/valves.md": "# Valves\n\nA relief valve opens when the glacier pump pressure "
                       "rises above the limit.\n",
    "guide/gauges.md": "# Gauges\n\nEach gauge reads the pressure of one pump.\n",
}
STAFF = frozenset({"staff"})
QUERY = "glacier pump pressure"


def settings_for(kind: str, request: pytest.FixtureRequest) -> Settings:
    settings = Settings()
    settings.visibility.groups_by_path = {"internal/*": ["staff"]}
    if kind == "postgres":
        settings.store.kind = "postgres"
        settings.store.dsn = request.getfixturevalue("pg_dsn")
    return settings


def write_docs(root: Path, restricted: int) -> Path:
    """The public pages, plus ``restricted`` staff-only pages that all use the query's words."""
    for rel, text in PUBLIC.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for n in range(restricted):
        (root / "internal").mkdir(exist_ok=True)
        (root / "internal" / f"shift-{n}.md").write_text(
            f"# Shift {n}\n\nGlacier pump pressure log, shift {n}: the glacier pump ran.\n",
            encoding="utf-8")
    return root


@pytest.fixture(params=["folder", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def before_and_after(tmp_path: Path, kind: str, request: pytest.FixtureRequest,
                     embedder: Embedder) -> tuple[Retriever, Retriever]:
    """Retrievers over the public pages alone, then over the same index after 50 staff
    pages joined it (the first stays pinned to its version)."""
    settings = settings_for(kind, request)
    docs, index = tmp_path / "docs", tmp_path / "index"
    build_index(write_docs(docs, 0), index, settings, embedder)
    alone = open_retriever(index, settings, embedder)
    if kind == "folder":
        _ = alone.index.lexical  # read before the re-index collects old versions
    build_index(write_docs(docs, 50), index, settings, embedder)
    return alone, open_retriever(index, settings, embedder)


def scored(retriever: Retriever, groups: frozenset[str], mode: str = "lexical"
           ) -> list[tuple[str, float]]:
    hits = retriever.search(QUERY, k=20, mode=mode, groups=groups)
    return [(h.chunk.chunk_id, h.score) for h in hits]


def test_restricted_chunks_do_not_move_a_public_hit_s_score(tmp_path, request, embedder,
                                                            store_kind):
    """Fifty staff-only chunks holding every query word: an outsider's lexical scores and
    ranks (and the hybrid order built on them) are those of an index without them."""
    alone, crowded = before_and_after(tmp_path, store_kind, request, embedder)
    want, got = scored(alone, frozenset()), scored(crowded, frozenset())
    assert len(want) == 3
    assert [cid for cid, _ in got] == [cid for cid, _ in want]
    assert [score for _, score in got] == pytest.approx([score for _, score in want], rel=1e-9)
    assert [c for c, _ in scored(crowded, frozenset(), "hybrid")] == \
        [c for c, _ in scored(alone, frozenset(), "hybrid")]
    # Staff find the restricted pages, scored over everything staff may see.
    staff = crowded.search(QUERY, k=60, mode="lexical", groups=STAFF)
    paths = {h.chunk.source_path for h in staff}
    assert {f"internal/shift-{n}.md" for n in range(50)} <= paths
    assert set(PUBLIC) <= paths


def test_abstention_counts_words_only_among_visible_chunks(tmp_path, request, embedder,
                                                           store_kind):
    """The signals the abstention check decides on weigh a question's words by how many
    chunks the asker may see hold them: words that only staff pages use are absent for an
    outsider, exactly as in an index without those pages."""
    from rag.core.records import Evidence
    from rag.pipeline import Pipeline

    alone, crowded = before_and_after(tmp_path, store_kind, request, embedder)
    question = "Which glacier pump shift log shows the pressure?"

    def signals(retriever: Retriever) -> dict[str, float]:
        pipeline = Pipeline(tmp_path / "index", Settings(), retriever=retriever)
        hits = retriever.search(question, k=3, groups=frozenset())
        evidence = [Evidence(f"E{n}", hit) for n, hit in enumerate(hits, 1)]
        return pipeline.abstention_signals(question, evidence, frozenset())

    outsider = signals(crowded)
    assert outsider == signals(alone)
    assert outsider["absent_share"] > 0  # "shift" and "log" are in no public page
    shift = tokenize("shift")[0]
    assert crowded.document_frequencies([shift], STAFF) == ({shift: 50}, 53)
