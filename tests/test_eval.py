"""rag eval: the CI gate on corpus/ against the committed baseline, and bad eval files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.core.errors import AccessError, ConfigError
from rag.core.records import Answer
from rag.eval.eval_run import chart_reports
from rag.eval.evaluation import EvalCase, load_cases, score_case, summarise
from rag.interfaces.cli.main import app
from tests.conftest import CORPORA, REPO, corpus_dir, make_hit

BASELINE = REPO / "reports" / "baseline-extractive.json"
FASTAPI_BASELINE = REPO / "reports" / "baseline-fastapi-extractive.json"


def _eval(tmp_path: Path, *extra: str, env: dict[str, str] | None = None):
    args = ["eval", str(REPO / "corpus" / "eval.jsonl"), "--docs", str(REPO / "corpus"),
            "--index", str(tmp_path / "index"), "--generator", "extractive",
            "--out", str(tmp_path / "reports" / "eval-extractive.json"), *extra]
    return CliRunner().invoke(app, args, env=env)


@pytest.mark.slow
def test_corpus_eval_holds_the_baseline_and_a_planted_regression_fails(tmp_path: Path,
                                                                       remembered_vectors):
    result = _eval(tmp_path, "--baseline", str(BASELINE))
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "reports" / "eval-extractive.json").read_text())
    assert report["overall"]["cases"] == 75 and report["overall"]["errors"] == 0
    assert (tmp_path / "reports" / "eval.png").stat().st_size > 1000
    assert "hit@5" in result.stdout and "citation_validity" in result.stdout
    # planted regression: only one hit per question lowers retrieval hit@5
    result = _eval(tmp_path, "--baseline", str(BASELINE), env={"RAG_RETRIEVAL__K": "1"})
    assert result.exit_code == 10
    assert "regression: hit@5 fell" in result.stderr


@pytest.mark.slow
def test_fastapi_dev_set_holds_its_baseline_and_a_planted_regression_fails(tmp_path: Path,
                                                                           remembered_vectors):
    """The FastAPI docs (155 files, chunked afresh, their vectors remembered from earlier
    runs: tests/vector_memo.py) against their own committed baseline; the second run reuses
    the index."""
    docs = corpus_dir("fastapi")
    cases = CORPORA.parent / "evals" / "fastapi.jsonl"
    out = tmp_path / "reports" / "eval-fastapi.json"
    args = ["eval", str(cases), "--docs", str(docs), "--index", str(tmp_path / "index"),
            "--generator", "extractive", "--out", str(out), "--baseline",
            str(FASTAPI_BASELINE)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    overall = json.loads(out.read_text())["overall"]
    assert overall["cases"] == 85 and overall["errors"] == 0
    assert "section_hit@3" in result.stdout and "answer words" in result.stdout
    # planted regression: BM25 alone finds fewer of the expected sections
    result = CliRunner().invoke(app, args, env={"RAG_RETRIEVAL__MODE": "dense"})
    assert result.exit_code == 10
    assert "regression: section_hit@3 fell" in result.stderr


def _answer(text: str, hits, insufficient: bool = False) -> Answer:
    return Answer(question="q", answer=text, statements=(), citations=(),
                  insufficient_evidence=insufficient, evidence=(), hits=tuple(hits))


def test_section_metrics_count_each_section_once_and_need_the_expected_lines():
    case = EvalCase(id="c", question="q", expected_sources=["a.md"],
                    expected_lines={"a.md": [(40, 45)]})
    hits = [make_hit("1", "a.md", heading="A > Intro", lines=(1, 10), rank=1),
            make_hit("2", "a.md", heading="A > Intro", lines=(12, 20), rank=2),
            make_hit("3", "b.md", heading="B", lines=(1, 5), rank=3),
            make_hit("4", "a.md", heading="A > Ports", lines=(38, 44), rank=4)]
    m = score_case(case, _answer("x", hits)).metrics
    assert m["hit@1"] == 1.0  # the right file is first...
    # ...but the right lines are in the third section: A > Intro counts once
    assert (m["section_hit@1"], m["section_hit@3"], m["section_mrr"]) == (0.0, 1.0, 1 / 3)
    m = score_case(case, _answer("x", hits[:3])).metrics
    assert (m["section_hit@5"], m["section_mrr"]) == (0.0, 0.0)


def test_the_chart_compares_each_generators_newest_report_on_the_same_eval_set(tmp_path: Path):
    def report(name: str, generator: str, eval_file: str, abstention: float, at: int) -> None:
        path = tmp_path / name
        path.write_text(json.dumps({"generator": generator, "eval_file": eval_file,
                                    "overall": {"abstention": abstention}}))
        os.utime(path, ns=(at, at))

    report("eval-fastapi-extractive.json", "extractive", "fastapi.jsonl", 0.93, 2)
    report("eval-fastapi-local.json", "local", "fastapi.jsonl", 0.90, 1)
    report("eval-a-corpus-run.json", "extractive", "corpus.jsonl", 0.50, 3)  # another set
    report("eval-an-older-run.json", "extractive", "fastapi.jsonl", 0.10, 0)  # older
    (tmp_path / "eval-broken.json").write_text("[1, 2")
    shown = chart_reports(tmp_path, "fastapi.jsonl")
    assert shown == {"extractive": {"abstention": 0.93}, "local": {"abstention": 0.90}}


def test_answer_length_in_words_code_included():
    case = EvalCase(id="c", question="q", expected_sources=["a.md"])
    hit = [make_hit("1", "a.md")]
    results = [score_case(case, _answer(" ".join(["word"] * n), hit)) for n in (10, 30, 300)]
    results.append(score_case(case, _answer("`app.get('/')` then `uvicorn main:app`", hit)))
    results.append(score_case(case, _answer("Run it:\n```\nuvicorn main:app\n```", hit)))
    results.append(score_case(case, _answer("Insufficient evidence.", hit, insufficient=True)))
    assert results[3].answer_words == 4
    assert results[4].answer_words == 4  # the code's words count, its fences do not
    words = summarise(results)["answer_words"]
    assert words == {"answers": 5, "median": 10, "max": 300, "over_250": 1}


def test_malformed_line_is_named(tmp_path: Path):
    bad = tmp_path / "eval.jsonl"
    bad.write_text('{"id": "a", "question": "q", "expected_sources": ["x.md"]}\n{"id": \n')
    with pytest.raises(ConfigError, match=r"eval.jsonl:2: not valid JSON"):
        load_cases(bad)
    bad.write_text('{"id": "a", "question": "q"}\n')
    with pytest.raises(ConfigError, match=r":1: an answerable case needs expected_sources"):
        load_cases(bad)
    bad.write_text('{"id": "a", "question": "q", "expected_sources": ["../../etc/passwd"]}\n')
    with pytest.raises(AccessError, match=r":1: .*outside the docs folder"):
        load_cases(bad)


def test_unseen_docs_and_missing_sources_are_reported(docs: Path, tmp_path: Path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(c) for c in [
        {"id": "ports", "question": "Which port does the HTTP API listen on?",
         "expected_sources": ["server-ports.md"], "must_include": ["8080"]},
        {"id": "gone", "question": "Where is the changelog?",
         "expected_sources": ["changelog.md"]},
        {"id": "none", "question": "Does it support Kubernetes operators?",
         "answerable": False},
    ]) + "\n")
    out = tmp_path / "r" / "eval-extractive.json"
    result = CliRunner().invoke(app, [
        "eval", str(cases), "--docs", str(docs), "--index", str(tmp_path / "idx"),
        "--generator", "extractive", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "expected source changelog.md is not in" in result.stderr
    report = json.loads(out.read_text())
    by_id = {c["id"]: c for c in report["cases"]}
    assert by_id["ports"]["metrics"]["hit@5"] == 1.0
    assert report["missing_sources"] == ["changelog.md"]


@pytest.mark.slow
def test_quick_start_question_is_answered_from_the_reindexing_guide(tmp_path: Path,
                                                                   remembered_vectors):
    """The README's quick start question: `rag index` again, cited at exactly those lines."""
    index = tmp_path / "index"
    runner = CliRunner()
    result = runner.invoke(app, ["index", str(REPO / "corpus"), "--index", str(index)])
    assert result.exit_code == 0, result.stderr
    result = runner.invoke(app, ["ask", "How do I re-index after editing the docs?",
                                 "--generator", "extractive", "--index", str(index), "--json"])
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert "Run `rag index` on the same folder again" in answer["answer"]
    cited = [(c["source_path"], c["start_line"], c["end_line"]) for c in answer["citations"]]
    assert not any(path == "notes/community-tips.md" for path, _, _ in cited)
    # Cited at exactly the quoted lines: from the sentence's first line to its paragraph's end.
    guide = (REPO / "corpus" / "guide" / "reindexing.md").read_text(encoding="utf-8").split("\n")
    start, end = next((s, e) for p, s, e in cited if p == "guide/reindexing.md")
    assert guide[start - 1].startswith("Run `rag index` on the same folder again")
    quoted = " ".join(line.strip() for line in guide[start - 1:end]
                      if line.strip() and not line.strip().startswith("```"))  # fences aside
    assert quoted in " ".join(w for w in answer["answer"].split() if w.strip("`"))
    plain = runner.invoke(app, ["ask", "How do I re-index after editing the docs?",
                                "--generator", "extractive", "--index", str(index)])
    assert f"guide/reindexing.md:{start}-{end}" in plain.stdout
    assert f"{start:>5} | Run `rag index` on the same folder again" in plain.stdout
