"""The library API (`import rag`): index, search, ask and verify, as a program calls them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rag
from rag.core.errors import RagError
from rag.indexer.embedding import FakeEmbedder

QUESTION = "Which port does the HTTP API listen on by default?"


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda *_a, **_k: FakeEmbedder())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_index_then_reindex_touches_only_what_changed(docs: Path, tmp_path: Path) -> None:
    first = rag.index(docs, tmp_path / "index")
    assert first.added and first.chunks_embedded == first.chunks_total > 0
    (docs / "faq.md").write_text("# FAQ\n\nOnly one question now.\n", encoding="utf-8")
    second = rag.index(docs, tmp_path / "index")
    assert second.changed == ["faq.md"] and second.added == []
    assert second.chunks_reused > 0


def test_ask_cites_real_lines_that_verify_exact(docs: Path, tmp_path: Path) -> None:
    rag.index(docs, tmp_path / "index")
    answer = rag.ask(QUESTION, index=tmp_path / "index")
    assert not answer.insufficient_evidence
    assert "8080" in answer.answer
    for statement in answer.statements:
        for c in statement.citations:
            lines = (docs / c.source_path).read_text(encoding="utf-8-sig").splitlines()
            assert 1 <= c.start_line <= c.end_line <= len(lines)
    checks = rag.verify(answer, docs=docs, index=tmp_path / "index")
    assert checks and {c.status for c in checks} == {"exact"}

    cited = answer.statements[0].citations[0]
    path = docs / cited.source_path
    path.write_text(path.read_text(encoding="utf-8").replace("8080", "8181"), encoding="utf-8")
    assert "exact" not in {c.status for c in rag.verify(answer, docs=docs,
                                                        index=tmp_path / "index")}


def test_ask_with_docs_indexes_the_folder_in_the_cache(docs: Path, tmp_path: Path) -> None:
    answer = rag.ask(QUESTION, docs=docs)
    assert "8080" in answer.answer
    assert any((tmp_path / "cache" / "rag" / "indexes").iterdir())


def test_search_hides_restricted_files_outside_their_groups(docs: Path, tmp_path: Path) -> None:
    rag.index(docs, tmp_path / "index")
    query = "on-call runbook"
    public = rag.search(query, index=tmp_path / "index", k=20)
    staff = rag.search(query, index=tmp_path / "index", k=20, groups=["staff"])
    assert all(not h.chunk.source_path.startswith("staff/") for h in public)
    assert any(h.chunk.source_path.startswith("staff/") for h in staff)


def test_verify_reads_a_saved_answer_file(docs: Path, tmp_path: Path) -> None:
    from rag.verifier.reverify import answer_json

    rag.index(docs, tmp_path / "index")
    answer = rag.ask(QUESTION, index=tmp_path / "index")
    saved = tmp_path / "answer.json"
    saved.write_text(json.dumps(answer_json(answer, docs)), encoding="utf-8")
    checks = rag.verify(saved, index=tmp_path / "index")
    assert [c.status for c in checks] == ["exact"] * len(checks) and checks
    with pytest.raises(RagError, match="no such file"):
        rag.verify(tmp_path / "missing.json", index=tmp_path / "index")


def test_importing_rag_loads_no_stage() -> None:
    code = ("import sys, rag; loaded = sorted(m for m in sys.modules if m.startswith('rag.'));"
            "print(loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
