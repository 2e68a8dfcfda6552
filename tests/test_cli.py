"""The command line as a user runs it: real embedding model, real index, clean failures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.interfaces.cli.main import app
from rag.reader.chunking import span_text
from tests.conftest import corpus_dir
from tests.vector_memo import Memos, remembered

pytestmark = pytest.mark.slow

FASTAPI_FILES = [
    "tutorial/path-params.md", "tutorial/query-params.md", "tutorial/body.md",
    "tutorial/first-steps.md", "tutorial/cors.md", "tutorial/static-files.md",
    "tutorial/request-files.md", "tutorial/testing.md", "deployment/docker.md",
    "advanced/websockets.md",
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def fastapi_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = corpus_dir("fastapi")
    target = tmp_path_factory.mktemp("fastapi")
    for rel in FASTAPI_FILES:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / rel, target / rel)
    return target


@pytest.fixture(scope="module")
def built(fastapi_docs: Path, tmp_path_factory: pytest.TempPathFactory, memos: Memos) -> Path:
    index = tmp_path_factory.mktemp("index") / "idx"
    with remembered(memos):
        code, out, err = run("index", str(fastapi_docs), "--index", str(index), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert len(report["added"]) == len(FASTAPI_FILES) and report["chunks_embedded"] > 30
    return index


def test_reindex_embeds_only_the_edited_paragraph(fastapi_docs: Path, built: Path):
    code, out, _ = run("index", str(fastapi_docs), "--index", str(built), "--json")
    assert code == 0 and json.loads(out)["chunks_embedded"] == 0
    target = fastapi_docs / "tutorial" / "cors.md"
    text = target.read_text(encoding="utf-8")
    paragraph = next(p for p in text.split("\n\n") if p.startswith("Even if they are all"))
    target.write_text(text.replace(paragraph, paragraph + " Also check your proxy.", 1),
                      encoding="utf-8")
    code, out, _ = run("index", str(fastapi_docs), "--index", str(built), "--json")
    report = json.loads(out)
    assert code == 0 and report["changed"] == ["tutorial/cors.md"]
    assert report["chunks_embedded"] == 1


def test_search_finds_the_right_file_with_exact_lines(fastapi_docs: Path, built: Path):
    code, out, _ = run("search", "how do I declare a path parameter", "--index", str(built),
                       "--json", "-k", "3")
    assert code == 0
    hits = [json.loads(line) for line in out.splitlines()]
    assert hits[0]["source_path"] == "tutorial/path-params.md"
    for hit in hits:
        lines = (fastapi_docs / hit["source_path"]).read_text(encoding="utf-8").split("\n")
        assert span_text(lines, hit["start_line"], hit["end_line"], hit.get("start_col"),
                         hit.get("end_col")) == hit["text"]
    code, out, _ = run("search", "path parameter", "--index", str(built), "--mode", "lexical")
    assert code == 0 and out.startswith("tutorial/path-params.md:")


def test_ask_extractive_prints_verified_citations(fastapi_docs: Path, built: Path):
    code, out, _ = run("ask", "How do I serve static files from a directory?", "--index",
                       str(built), "--generator", "extractive", "--json")
    answer = json.loads(out)
    assert code == 0 and not answer["insufficient_evidence"] and answer["citations"]
    for c in answer["citations"]:
        lines = (fastapi_docs / c["source_path"]).read_text(encoding="utf-8").split("\n")
        ev = next(e for e in answer["evidence"] if e["label"] == c["label"])
        # Line-precise: the cited lines lie inside the evidence, and the file holds them.
        assert ev["start_line"] <= c["start_line"] <= c["end_line"] <= ev["end_line"]
        first = c["start_line"] - ev["start_line"]
        cited = ev["text"].split("\n")[first:first + c["end_line"] - c["start_line"] + 1]
        assert span_text(lines, c["start_line"], c["end_line"], ev.get("start_col"),
                         ev.get("end_col")) == "\n".join(cited) == c["text"]
    code, out, _ = run("ask", "How do I serve static files from a directory?", "--index",
                       str(built), "--generator", "extractive")
    assert code == 0 and "Citations:" in out and "static-files.md:" in out
    assert out.split("\n")[0].endswith("]") and "\x1b" not in out  # labels; piped: plain


@pytest.mark.parametrize("args, needle, code", [
    (["index", "/no/such/folder", "--index", "/tmp/rag-test-never"], "does not exist", 5),
    (["search", "x", "--index", "/tmp/rag-test-no-index"], "no index at", 5),
    (["search", "x", "--config", "/no/such.toml"], "no such file", 4),
    (["search", "x", "--mode", "fuzzy", "--index", "{built}"], "unknown search mode", 2),
])
def test_bad_input_is_one_clear_line(built: Path, args, needle, code):
    args = [a.replace("{built}", str(built)) for a in args]
    exit_code, out, err = run(*args)
    assert exit_code == code
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err + out


def test_bad_config_values_are_one_line(tmp_path: Path, built: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[retrieval]\nk = 0\n", encoding="utf-8")
    code, _, err = run("search", "x", "--index", str(built), "--config", str(bad))
    assert code == 4 and "retrieval.k" in err and err.count("\n") == 1
    bad.write_text("[retrieval\n", encoding="utf-8")
    code, _, err = run("search", "x", "--index", str(built), "--config", str(bad))
    assert code == 4 and "not valid TOML" in err


def test_model_endpoint_down_is_one_line(built: Path, monkeypatch):
    monkeypatch.setenv("RAG_GENERATION__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAG_GENERATION__RETRIES", "0")
    monkeypatch.setenv("RAG_VERIFICATION__MIN_QUESTION_COVERAGE", "0")
    code, _, err = run("ask", "How do I serve static files?", "--index", str(built),
                         "--generator", "openai")
    assert code == 7 and "not reachable" in err and err.count("\n") == 1


def test_ask_with_docs_reports_the_index_it_built_a_line_at_a_time(tmp_path: Path,
                                                                  memos: Memos) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "port.md").write_text("# Port\n\nThe server listens on port 8080.\n",
                                  encoding="utf-8")
    (docs / "empty.md").write_text("", encoding="utf-8")
    with remembered(memos):
        code, out, err = run("ask", "Which port?", "--docs", str(docs),
                             "--index", str(tmp_path / "idx"))
    assert code == 0, err
    assert "8080" in out
    assert "\\n" not in err  # no escaped line break where a new line belongs
    assert "\n1 file gave no chunks: 1 empty" in err
