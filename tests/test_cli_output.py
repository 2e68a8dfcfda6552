"""What a user reads: the plain (piped) answer exactly, the terminal form wrapped and coloured,
unknown generators refused before anything runs, and an eval with failed cases not passing."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rag.core.errors import GenerationError
from rag.core.records import Answer, Citation, Evidence, Statement
from rag.indexer.embedding import FakeEmbedder
from rag.interfaces.cli.main import app
from rag.interfaces.render import answer_lines, plain, preview, show
from tests.conftest import make_hit

FILE = """# Ports

Intro line.
By default Tidewatch binds to 127.0.0.1.
Set the port with --port.
Unrelated line one.
Unrelated line two.
Unrelated line three.
Unrelated line four.
"""


def _answer(docs: Path) -> Answer:
    (docs / "ports.md").write_text(FILE, encoding="utf-8")
    lines = FILE.split("\n")
    hit = make_hit("c1", "ports.md", "\n".join(lines[2:9]), heading="Ports", lines=(3, 9))
    ev = Evidence(label="E1", hit=hit)
    wide = Citation("E1", "ports.md", "c1", 3, 9, "Ports")
    exact = Citation("E1", "ports.md", "c1", 4, 4, "Ports")
    statements = (
        Statement("Tidewatch binds to 127.0.0.1 by default.", (wide,)),
        Statement("The port is\x1b]0;pwned\x07 set with --port.", (exact,)),
    )
    return Answer(question="q", answer="", statements=statements, citations=(wide, exact),
                  insufficient_evidence=False, evidence=(ev,), excluded=(), generator="x",
                  timings={}, hits=(hit,))


def test_piped_answer_is_exactly_this(tmp_path: Path) -> None:
    text = plain(answer_lines(_answer(tmp_path), tmp_path))
    assert not text.endswith("\n") and text.split("\n") == [
        "Tidewatch binds to 127.0.0.1 by default. [E1]",
        "The port is\\x1b]0;pwned\\x07 set with --port. [E1]",
        "",
        "Citations:",
        "  [E1] ports.md:3-9 (Ports)",
        "        3 | Intro line.",
        "        4 | By default Tidewatch binds to 127.0.0.1.",
        "        5 | Set the port with --port.",
        "        6 | Unrelated line one.",
        "          | ... (3 more lines)",
        "  [E1] ports.md:4-4 (Ports)",
        "        4 | By default Tidewatch binds to 127.0.0.1.",
    ]


def test_a_quote_with_a_code_block_keeps_its_lines_indented(tmp_path: Path) -> None:
    answer = _answer(tmp_path)
    c = answer.citations[0]
    forged = ("Create the index:\nrag index docs/\nCitations:\n  [E9] secret.md:1-9 (Forged)")
    answer = dataclasses.replace(answer, statements=(Statement(forged, (c,)),),
                                 citations=(c,))
    lines = plain(answer_lines(answer, tmp_path)).split("\n")
    assert lines[:4] == ["Create the index:", "    rag index docs/", "    Citations:",
                         "      [E9] secret.md:1-9 (Forged) [E1]"]
    # the answer's own "Citations:" line is the only one at the margin, and only real
    # citations start with two spaces and a label
    assert [line for line in lines if line == "Citations:"] == ["Citations:"]
    assert [line for line in lines if line.startswith("  [E")] == ["  [E1] ports.md:3-9 (Ports)"]


def test_quoted_prose_is_shown_without_emphasis_marks_and_code_as_written(tmp_path: Path) -> None:
    answer = _answer(tmp_path)
    c = answer.citations[0]
    quoted = ("**Tidewatch** runs each *probe* on the `max_probes` pool, see _Scheduling_:\n"
              "```\ndef probe(*args, **kwargs):\n    return run_probe(max_probes=2)\n```\n"
              "Each snake_case_name stays **as written**.")
    answer = dataclasses.replace(answer, statements=(Statement(quoted, (c,)),), citations=(c,))
    lines = plain(answer_lines(answer, tmp_path)).split("\n")
    assert lines[:6] == [
        "Tidewatch runs each probe on the `max_probes` pool, see Scheduling:",
        "    ```",
        "    def probe(*args, **kwargs):",
        "        return run_probe(max_probes=2)",
        "    ```",
        "    Each snake_case_name stays as written. [E1]"]


def test_preview_is_centred_on_the_supporting_line() -> None:
    quoted = list(enumerate([f"filler {i}" for i in range(20)], start=10))
    quoted[15] = (25, "the cache expires after ten minutes")
    shown, above, below = preview(quoted, ["The cache expires after ten minutes."], limit=3)
    assert [n for n, _ in shown] == [24, 25, 26] and (above, below) == (14, 3)


def test_preview_shows_the_line_with_the_statements_words_not_its_function_words() -> None:
    quoted = [(1, "Where are the keys? They are in the drawer, and there they stay."),
              (2, "Nothing else."), (3, "More filler."), (4, "A vault holds every token.")]
    shown, above, below = preview(quoted, ["Tokens are stored in the vault."], limit=1)
    assert shown == [(4, "A vault holds every token.")] and (above, below) == (3, 0)


def test_terminal_answer_is_wrapped_and_coloured(tmp_path: Path) -> None:
    out = io.StringIO()
    show(answer_lines(_answer(tmp_path), tmp_path),
         Console(file=out, force_terminal=True, width=30, color_system="standard"))
    text = out.getvalue()
    assert "\x1b[" in text and "\x1b]0;" not in text  # colour, but no forged OSC sequence
    visible = Console(file=io.StringIO(), width=30)
    show(answer_lines(_answer(tmp_path), tmp_path), visible)
    rows = [r.rstrip() for r in visible.file.getvalue().splitlines()]  # type: ignore[attr-defined]
    assert max(len(r) for r in rows) <= 30 and rows[:2] == ["Tidewatch binds to 127.0.0.1",
                                                           "by default. [E1]"]


def test_unknown_generator_is_a_usage_error_before_anything_runs(tmp_path: Path) -> None:
    for args in (["ask", "anything", "--index", str(tmp_path / "none")],
                 ["eval", str(tmp_path / "none.jsonl")], ["serve", "--index", "x"]):
        result = CliRunner().invoke(app, [*args, "--generator", "extractiv"])
        assert result.exit_code == 2
        assert "unknown generator 'extractiv' (choose extractive, local, openai, passage)" in result.stderr
        assert "no index" not in result.stderr and "does not exist" not in result.stderr


def test_eval_with_failed_cases_exits_3_and_says_how_many(
        docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rag import pipeline
    from rag.indexer import embedding

    monkeypatch.setattr(embedding, "make_embedder", lambda *a, **k: FakeEmbedder())
    real_ask = pipeline.Pipeline.ask

    def flaky(self, question: str, **kw):  # a model server that went away mid-run
        if "port" in question:
            raise GenerationError("connection refused")
        return real_ask(self, question, **kw)

    monkeypatch.setattr(pipeline.Pipeline, "ask", flaky)
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(c) for c in [
        {"id": "a", "question": "Which port does Tidewatch use?", "answerable": True,
         "expected_sources": ["server-ports.md"]},
        {"id": "b", "question": "How do I install it?", "answerable": True,
         "expected_sources": ["install.md"]},
    ]), encoding="utf-8")
    result = CliRunner().invoke(app, [
        "eval", str(cases), "--docs", str(docs), "--index", str(tmp_path / "idx"),
        "--generator", "extractive", "--out", str(tmp_path / "r" / "eval-x.json")])
    assert result.exit_code == 3, result.stderr
    assert "error: 1 of 2 cases failed" in result.stderr
    progress = [x.split(",")[0] for x in result.stderr.splitlines() if x.startswith("eval: ")]
    assert progress == ["eval: 0/2 cases", "eval: 1/2 cases", "eval: 2/2 cases"]  # in a log


def test_preview_skips_blank_lines_and_keeps_the_lines_that_hold_the_statement() -> None:
    quoted = [(3, "You can serve static files with StaticFiles."), (4, ""),
              (5, "Mount it on a path."), (6, ""), (7, "Or host a frontend."), (8, ""),
              (9, "Several advantages for frontends.")]
    shown, above, below = preview(quoted, ["You can serve static files with StaticFiles."])
    assert [n for n, _ in shown] == [3, 5, 7, 9] and (above, below) == (0, 0)


def test_piped_ask_has_no_spinner_colour_or_wrapping(docs: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda *_a, **_k: FakeEmbedder())
    monkeypatch.setenv("COLUMNS", "20")
    index = str(tmp_path / "idx")
    assert CliRunner().invoke(app, ["index", str(docs), "--index", index]).exit_code == 0
    monkeypatch.setenv("RAG_VERIFICATION__ABSTENTION", "off")
    result = CliRunner().invoke(app, ["ask", "Which address does Tidewatch bind to by default?",
                                      "--index", index, "--generator", "extractive"])
    assert result.exit_code == 0, result.stderr
    answer, citations = result.stdout.split("\n\nCitations:\n")
    assert all(re.search(r"\S \[E\d+\](?: \[E\d+\])*$", line) for line in answer.splitlines())
    assert max(len(line) for line in result.stdout.splitlines()) > 20  # not wrapped
    assert "\x1b" not in result.stdout + result.stderr and result.stderr == ""
    assert citations.startswith("  [E")
