"""The claims benchmark (evals/claims.jsonl) and the checks it measures: a wrong statement
that keeps most of its source's words is refused, a right one is kept."""

from __future__ import annotations

import importlib.util
import json

import pytest

from rag.verifier.consistency import inconsistency
from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("claims_eval", REPO / "scripts" / "claims_eval.py")
assert _spec is not None and _spec.loader is not None
claims_eval = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(claims_eval)

# The figures the quote-backed check reached when this test was written, less 0.02.
FLOORS = {"supported": 0.856, "all_wrong": 0.819, "negated": 0.898, "number_changed": 0.947,
          "identifier_swapped": 0.938}
TOLERANCE = 0.02


def test_the_benchmark_has_every_kind_over_both_corpora() -> None:
    cases = [json.loads(line) for line in (REPO / "evals" / "claims.jsonl").open()]
    assert len(cases) >= 300 and {c["corpus"] for c in cases} == {"fastapi", "hugo"}
    assert {c["kind"] for c in cases} == set(claims_eval.SUPPORTED + claims_eval.WRONG)
    assert all(c["evidence"]["text"] and c["evidence"]["end_line"] >= c["evidence"]["start_line"]
               for c in cases)


def test_the_quote_check_holds_its_figures_and_beats_the_overlap_check() -> None:
    report, _ = claims_eval.run(REPO / "evals" / "claims.jsonl")
    rejected = report["rejected"]
    assert report["supported_accepted"]["new"] >= FLOORS["supported"] - TOLERANCE
    for kind in ("all_wrong", "negated", "number_changed", "identifier_swapped"):
        assert rejected[kind]["new"] >= FLOORS[kind] - TOLERANCE, (kind, rejected[kind])
        assert rejected[kind]["new"] > rejected[kind]["old"]


@pytest.mark.parametrize("statement, quote, why", [
    ("The default summary length is 50 words.", "Default is `70`", "the number 50"),
    ("Requests time out after 30 minutes.", "times out after 30 seconds", "'30 minute"),
    ("Install Python 3.8 or later.", "Python 3.10 or later", "the version 3.8"),
    ("Pass `--inMemory` to render to memory.", "use the `--renderToMemory` flag", "'--inMemory'"),
    ("Set `outputDir` to change it.", "set `publishDir` in your configuration", "'outputDir'"),
    ("Hugo clears the `public` directory.", "Hugo does not clear the `public` directory",
     "its quote is negated"),
    ("Drafts are not built.", "Drafts are built", "it negates"),
])
def test_a_statement_that_differs_from_its_quote_says_how(statement: str, quote: str,
                                                          why: str) -> None:
    reason = inconsistency(statement, quote, quote)
    assert reason is not None and why in reason, reason


@pytest.mark.parametrize("statement, quote", [
    ("Success codes run from 200 to 299.", "the 200 HTTP status codes (from 200 to 299)"),
    ("Use `fastapi run` in production.", "For production you would use `fastapi run`"),
    ("Low ports need two capabilities.", "ports need two capabilities"),
    ("Run one process per container rather than workers.",
     "you will probably not want to use workers"),
])
def test_a_statement_that_agrees_with_its_quote_passes(statement: str, quote: str) -> None:
    assert inconsistency(statement, quote, quote) is None
