"""Verifier: labels map to exactly what was shown; statements are scored against their evidence."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag.core.errors import CitationError
from rag.core.records import Citation, Evidence
from rag.verifier.verification import check_support, support_score, verify_citations
from tests.conftest import make_hit


def ev(label: str, path: str, text: str, *, heading: str | None = None,
       lines: tuple[int, int] = (1, 5), visibility: tuple[str, ...] = ()) -> Evidence:
    hit = make_hit(f"id-{label}-{path}", path, text, heading=heading, lines=lines,
                   rank=int(label[1:]), visibility=visibility)
    return Evidence(label=label, hit=hit)


PORTS = ev("E1", "docs/server.md",
           "By default the development server listens on port 8000. Pass --port to change it.",
           heading="Server > Ports", lines=(13, 17))
DATABASE = ev("E2", "docs/database.md",
              "Database passwords are read from the DATABASE_URL environment variable.",
              heading="Database > Credentials", lines=(40, 52))
INSTALL = ev("E3", "docs/install.md", "Install the package with pip install fastapi[standard].",
             heading=None, lines=(3, 4))
STAFF = ev("E4", "internal/secrets.md", "The admin console lives on port 9443.",
           heading="Internal", lines=(1, 2), visibility=("staff",))
SHOWN = [PORTS, DATABASE, INSTALL, STAFF]


# ---------------------------------------------------------------- labels


@pytest.mark.parametrize("label", ["E0", "E01", "e2", " E2", "E2 ", "E99", "", "E", "2",
                                   "[E2]", "E2,E3", "E\u0662", "Ｅ2", None, 2])
def test_labels_not_shown_are_errors(label: object) -> None:
    with pytest.raises(CitationError) as info:
        verify_citations([label], SHOWN)  # type: ignore[list-item]
    message = str(info.value)
    assert "unknown evidence label" in message and "(shown: E1-E4)" in message
    assert "\n" not in message


def test_error_names_the_bad_label() -> None:
    with pytest.raises(CitationError, match=r"^unknown evidence label 'E99' \(shown: E1-E4\)$"):
        verify_citations(["E1", "E99"], SHOWN)


def test_error_when_nothing_was_shown() -> None:
    with pytest.raises(CitationError, match=r"\(shown: none\)"):
        verify_citations(["E1"], [])


def test_good_labels_map_to_exactly_the_evidence() -> None:
    got = verify_citations(["E2", "E1"], SHOWN)
    assert got == [
        Citation("E2", "docs/database.md", "id-E2-docs/database.md", 40, 52,
                 "Database > Credentials"),
        Citation("E1", "docs/server.md", "id-E1-docs/server.md", 13, 17, "Server > Ports"),
    ]
    assert verify_citations(["E3"], SHOWN)[0].heading is None


def test_repeated_labels_collapse_in_order() -> None:
    got = verify_citations(["E3", "E1", "E3", "E1"], SHOWN)
    assert [c.label for c in got] == ["E3", "E1"]


def test_visibility_is_checked_again_at_citation_time() -> None:
    with pytest.raises(CitationError, match="may not see") as info:
        verify_citations(["E4"], SHOWN, allowed_groups=frozenset({"public"}))
    assert "internal/secrets.md" not in str(info.value)  # the path is not leaked
    assert verify_citations(["E4"], SHOWN, allowed_groups=frozenset({"staff"}))[0].label == "E4"
    # public evidence is citable by anyone; no groups given means no check
    assert verify_citations(["E1"], SHOWN, allowed_groups=frozenset())[0].label == "E1"
    assert verify_citations(["E4"], SHOWN)[0].label == "E4"


# ---------------------------------------------------------------- support


def test_statement_copying_its_evidence_is_supported() -> None:
    score = support_score("The development server listens on port 8000 by default.", [PORTS])
    assert score == 1.0


def test_statement_about_something_else_is_not_supported() -> None:
    assert support_score("Database passwords must be rotated every month.", [PORTS]) < 0.3


def test_right_fact_wrong_label_is_unsupported() -> None:
    [right, wrong] = check_support(
        [("The server listens on port 8000 by default.", ["E1"]),
         ("The server listens on port 8000 by default.", ["E2"])],
        SHOWN, threshold=0.5, quoted=["the development server listens on port 8000"] * 2,
    )
    assert right.supported and right.support_score >= 0.5
    assert not wrong.supported and wrong.support_score < 0.5
    assert [c.source_path for c in wrong.citations] == ["docs/database.md"]


def test_plurals_headings_and_identifiers_count() -> None:
    # "ports" ~ "port" (plural), "credentials" comes from the heading, identifier kept whole
    assert support_score("Ports: 8000", [PORTS]) == 1.0
    assert support_score("Credentials are in DATABASE_URL.", [DATABASE]) == 1.0
    assert support_score("Set DATABASE_URI.", [DATABASE]) < 1.0
    assert support_score("Install it: pip install fastapi[standard]", [INSTALL]) == 1.0


def test_score_edge_cases() -> None:
    assert support_score("Port 8000.", []) == 0.0
    assert support_score("It is what it is.", [PORTS]) == 0.0  # no content words
    assert support_score("port 8000 and port 8000", [PORTS]) == 1.0


def test_empty_citations_are_unsupported_even_at_threshold_zero() -> None:
    [st] = check_support([("Port 8000 is the default.", [])], SHOWN, threshold=0.0)
    assert st.citations == () and not st.supported and st.support_score == 0.0


def test_check_support_citing_several_uses_all_of_them() -> None:
    text = "The server listens on port 8000 and passwords come from DATABASE_URL."
    quote = "listens on port 8000 ... read from the DATABASE_URL environment variable"
    [one] = check_support([(text, ["E1"])], SHOWN, threshold=0.8, quoted=[quote])
    [both] = check_support([(text, ["E1", "E2"])], SHOWN, threshold=0.8, quoted=[quote])
    assert not one.supported and both.supported
    assert [c.label for c in both.citations] == ["E1", "E2"]


def test_check_support_raises_on_unknown_or_forbidden_labels() -> None:
    with pytest.raises(CitationError, match="'E7'"):
        check_support([("Port 8000.", ["E1"]), ("x", ["E7"])], SHOWN, threshold=0.5)
    with pytest.raises(CitationError, match="may not see"):
        check_support([("Admin console on 9443.", ["E4"])], SHOWN, threshold=0.5,
                      allowed_groups=frozenset({"public"}))


def test_scoring_is_deterministic() -> None:
    text = "Pass --port to change the port of the development server."
    assert len({support_score(text, [PORTS, DATABASE]) for _ in range(5)}) == 1


def test_function_words_do_not_count() -> None:
    # only "port" and "8000" are content words; "does"/"those"/"whose" must not dilute them
    assert support_score("Does it use those ports? Those whose port is 8000.", [PORTS]) == 1.0
    assert support_score("It doesn\u2019t, and that\u2019s why it\u2019s so.", [PORTS]) == 0.0


_texts = st.text(alphabet=string.ascii_letters + string.digits + " _-./:'\n\u00e9", max_size=80)


@settings(max_examples=100, deadline=None)
@given(statement=_texts, text=_texts, other=_texts)
def test_support_score_properties(statement: str, text: str, other: str) -> None:
    own = ev("E1", "docs/a.md", statement)
    words_in_it = support_score(statement, [own])
    assert words_in_it in (0.0, 1.0)  # a statement is always fully supported by itself
    first = ev("E1", "docs/b.md", text)
    second = ev("E2", "docs/c.md", other)
    one, both = support_score(statement, [first]), support_score(statement, [first, second])
    assert 0.0 <= one <= both <= 1.0  # citing more evidence never lowers the score



def test_a_statement_of_only_labels_is_not_supported():
    cited = [ev("E1", "docs/labels.md", "Evidence E1 names the evidence store.")]
    assert support_score("Evidence E1", cited) == 0.0
    assert support_score("E1 names the evidence store.", cited) == 1.0


def test_a_one_word_statement_is_not_supported():
    cited = [ev("E1", "docs/a.md", "Rag indexes Markdown files and answers questions.")]
    [one] = check_support([("Rag.", ["E1"])], cited, threshold=0.5)
    [two] = check_support([("Rag indexes Markdown.", ["E1"])], cited, threshold=0.5)
    assert not one.supported and two.supported


# What SmolLM2 wrote on the FastAPI dev set once it lost the thread: every content word is
# in its evidence, so the overlap score alone passed them.
GARBLED = [
    ("Re-indexing a running file with multiple files, re-indexing the same file, re-indexing "
     "multiple files, and re-indexing multiple folders, re-indexing a_folder,re-indexing_a_b."),
    "I am a user of the path '/users/me/users/users/: 1: 1: 1: 1: 1: 1: 1:.",
    "The query parameters are optional, but can be required. The query parameters,#,#,#,theorem.",
    "Dependencies with `yield` and `scope`}, {#14099:14.",
    "The API checks that the user is authorized and returns the token,</untrusted-source.",
    "The same dependency is used to call multiple times, but instead of calling the.",
    "The frontend app serves static files to the client. The frontend app,client,client-side,s.",
]
REINDEX = ev("E1", "docs/reindexing.md",
             "Re-indexing: run rag index on the same folder again after you edit, add, rename or "
             "delete files; multiple folders, running file, same user path /users/me 1 query "
             "parameters optional required theorem Dependencies yield scope 14099 14 API checks "
             "user authorized returns token dependency used call multiple times instead calling "
             "frontend app serves static files client client-side a_folder a_b")


@pytest.mark.parametrize("statement", GARBLED)
def test_degenerate_model_output_is_not_supported_though_its_words_are(statement: str) -> None:
    assert support_score(statement, [REINDEX]) >= 0.5
    [checked] = check_support([(statement, ["E1"])], [REINDEX], threshold=0.5,
                              quoted=["run rag index on the same folder again"])
    assert not checked.supported and checked.reason == "it reads as garbled output, not a sentence"


@pytest.mark.parametrize("statement", [
    "Run rag index on the same folder again after you edit files.",
    ("The configuration file is searched for up the file tree, starting at the file being "
     "formatted, until a config file is found."),
    ("Pass `--index`, for example `rag index ~/wiki --index indexes/wiki`, and the same "
     "`--index` to `rag search` and `rag ask`."),
])
def test_sentences_that_repeat_a_word_or_list_code_are_still_supported(statement: str) -> None:
    cited = [ev("E1", "docs/a.md", statement)]
    [checked] = check_support([(statement, ["E1"])], cited, threshold=0.5)
    assert checked.supported


def test_a_verbatim_quote_is_never_judged_garbled() -> None:
    code = "rag index docs/ && rag index docs/ && rag index docs/ && rag index docs/"
    cited = [ev("E1", "docs/a.md", f"Index it four times:\n{code}", lines=(10, 11))]
    [paraphrase] = check_support([(code, ["E1"])], cited, threshold=0.5)
    [quoted] = check_support([(code, ["E1"])], cited, threshold=0.5, quotes=[(11, 11)])
    assert quoted.supported and quoted.citations[0].start_line == 11
    assert paraphrase.supported  # found verbatim in the chunk, so not a paraphrase either
