"""The passage baseline (`--generator passage`): one contiguous passage of the top evidence,
quoted whole, at its own lines."""

from __future__ import annotations

from rag.answer.passage import MAX_WORDS
from rag.core.records import Answer
from rag.eval.evaluation import EvalCase, score_case
from rag.generator.passage import PassageGenerator
from tests.test_extractive import evidence, lines_of

PAGE = ("# Server\n\nThe server is a small HTTP process.\n\n"
        "To change the port, set these variables:\n\n- `PORT`: the port, 8080 by default.\n"
        "- `HOST`: the address to bind.\n\n## Logs\n\nLogs go to stderr.")


def test_the_list_that_answers_is_quoted_whole_with_its_lead_in_and_its_section() -> None:
    top = evidence("E1", PAGE, start=10)
    other = evidence("E2", "The port of the database is 5432.", path="db.md")
    result = PassageGenerator().generate("How do I change the port of the server?", [top, other])
    [statement] = result.answer.statements
    assert statement.evidence == ["E1"]  # only the top evidence is quoted
    # Its section fits the cap, so all of it: the paragraph before the list's lead-in too,
    # and not the next heading's text.
    assert result.quotes == ((12, 17),)
    assert statement.text.splitlines() == [
        "The server is a small HTTP process.", "To change the port, set these variables:", "- `PORT`: the port, 8080 by default.",
        "- `HOST`: the address to bind."]
    assert "8080 by default" in lines_of(top, result.quotes[0])


def test_a_passage_reads_on_before_it_reads_back_and_stays_under_the_cap() -> None:
    before = "\n\n".join(f"Background paragraph {i} says little about anything." for i in range(30))
    page = f"# Guide\n\n{before}\n\nThe port is set with `PORT`.\n\nIt defaults to 8080."
    result = PassageGenerator().generate("How is the port set?", [evidence("E1", page)])
    text = result.answer.statements[0].text
    assert text.endswith("The port is set with `PORT`.\nIt defaults to 8080.")
    assert "Background paragraph 29" in text and "Background paragraph 0 " not in text
    assert len(text.split()) <= MAX_WORDS


def test_a_long_code_block_is_cut_at_a_line_and_no_evidence_is_no_answer() -> None:
    body = "\n".join(f"print('line {i} of the example')" for i in range(200))
    top = evidence("E1", f"Run the example:\n\n```python\n{body}\n```")
    result = PassageGenerator().generate("How do I run the example?", [top])
    text = result.answer.statements[0].text
    assert text.startswith("Run the example:\n```") and text.endswith("```")
    assert len(text.split()) <= MAX_WORDS + 2
    start, end = result.quotes[0]
    assert start == 1 and 4 < end < 200
    assert PassageGenerator().generate("anything", []).answer.insufficient_evidence


def test_the_reader_ceiling_counts_what_the_shown_evidence_holds() -> None:
    shown = (evidence("E1", PAGE),)
    case = EvalCase(id="c", question="q", expected_sources=["guide/server.md"],
                    must_include=["8080 by default", "not in the docs"])
    answer = Answer(question="q", answer="The server is a small HTTP process.", statements=(),
                    citations=(), insufficient_evidence=False, evidence=shown, hits=())
    metrics = score_case(case, answer).metrics
    assert metrics["must_include"] == 0.0 and metrics["reader_ceiling"] == 0.5
