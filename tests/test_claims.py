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

# The figures each check reached when this test was last brought up to date; a change may
# lose TOLERANCE of any of them, no more. "new" is the quote check answers go through,
# "check" is rag check's verdict on the statement alone.
FLOORS = {"new": {"supported": 0.962, "all_wrong": 0.907, "negated": 0.980,
                  "number_changed": 1.0, "identifier_swapped": 0.979},
          "check": {"supported": 0.846, "all_wrong": 0.902, "negated": 0.918,
                    "number_changed": 1.0, "identifier_swapped": 0.979}}
TOLERANCE = 0.02


def test_the_benchmark_has_every_kind_over_both_corpora() -> None:
    cases = [json.loads(line) for line in (REPO / "evals" / "claims.jsonl").open()]
    assert len(cases) >= 300 and {c["corpus"] for c in cases} == {"fastapi", "hugo"}
    assert {c["kind"] for c in cases} == set(claims_eval.SUPPORTED + claims_eval.WRONG)
    assert all(c["evidence"]["text"] and c["evidence"]["end_line"] >= c["evidence"]["start_line"]
               for c in cases)


@pytest.mark.parametrize("check", ["new", "check"])
def test_each_check_holds_its_figures_and_beats_the_overlap_check(check: str) -> None:
    report, _ = claims_eval.run(REPO / "evals" / "claims.jsonl")
    rejected, floors = report["rejected"], FLOORS[check]
    assert report["supported_accepted"][check] >= floors["supported"] - TOLERANCE
    for kind in ("all_wrong", "negated", "number_changed", "identifier_swapped"):
        assert rejected[kind][check] >= floors[kind] - TOLERANCE, (kind, rejected[kind])
        assert rejected[kind][check] > rejected[kind]["old"]


@pytest.mark.parametrize("statement, quote, why", [
    ("The default summary length is 50 words.", "Default is `70`", "the number 50"),
    ("Requests time out after 30 minutes.", "times out after 30 seconds", "'30 minute"),
    ("Install Python 3.8 or later.", "Python 3.10 or later", "the version 3.8"),
    ("Pass `--inMemory` to render to memory.", "use the `--renderToMemory` flag", "'--inMemory'"),
    ("Set `outputDir` to change it.", "set `publishDir` in your configuration", "'outputDir'"),
    ("Hugo clears the `public` directory.", "Hugo does not clear the `public` directory",
     "it states 'clears', which its quote denies"),
    ("Drafts are not built.", "Drafts are built", "it denies 'built', which its quote states"),
    ("Drafts are not published.", "Drafts are published unless you pass `--buildDrafts`",
     "it denies 'published'"),
    ("Shortcode templates in content are enabled by default.",
     "creating shortcode templates within content is disabled by default",
     "it says 'enabled' where its quote says 'disabled'"),
    ("Background tasks run before the response is sent.",
     "background tasks to be run after returning a response", "'before' where its quote"),
    ("Test functions do not need a `test_` prefix.",
     "Create functions with a name that starts with `test_`", "it negates what its quote"),
    ("Content authors are trusted.", "template authors are trusted, but content authors are not",
     "it states 'content'"),
    ("Use a `<!--summary-->` divider.", "Use a `<!--more-->` divider to end the summary",
     "'<!--summary-->'"),
    ("A bundle holds at least one resource.", "a bundle holds zero or more resources",
     "the number 1"),
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
    # Negated on both sides, in other words; an antonym for a negation; a word the quote
    # both states and denies ("uv creates one; you don't need to create one").
    ("You do not have to create an environment yourself.",
     "uv creates one. You don't need to create or activate one yourself"),
    ("The option is not enabled by default.", "the option is disabled by default"),
    ("A plain `def` app is still an `async` application.",
     "uses normal `def` functions instead of `async def`, it is still an `async` application"),
    ("Drafts are left out unless `buildDrafts` is set.", "Whether to include drafts: `buildDrafts`"),
    ("Output goes to `public` unless you say otherwise.", "the default output folder is `public`"),
])
def test_a_statement_that_agrees_with_its_quote_passes(statement: str, quote: str) -> None:
    assert inconsistency(statement, quote, quote) is None


def test_an_added_claim_is_refused_and_a_paraphrased_clause_is_not() -> None:
    """Every clause of a statement must be backed by the lines it quotes."""
    from rag.verifier.verification import unbacked_clause

    lines = ["Query parameters can be optional and can have default values."]
    assert unbacked_clause("Query parameters may be optional, and they can have defaults.",
                           lines) is None
    assert unbacked_clause("Query parameters can be optional, which are cached per session.",
                           lines) == "which are cached per session."
