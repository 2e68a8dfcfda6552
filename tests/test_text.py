"""The one text analyser and the one sentence rule, as every stage reads them."""

from __future__ import annotations

from rag.core.text import (
    content_words,
    index_terms,
    names,
    query_terms,
    split_sentences,
    terms,
    tokens,
)
from rag.reader.sentences import split_line
from tests.conftest import quotable_sentences


def test_tokens_fold_case_and_keep_identifiers_numbers_and_versions_whole() -> None:
    text = "Set `max_tokens` via app.get on port 8080, v1.2.3's notes"
    assert tokens(text) == ["set", "max_tokens", "via", "app.get", "on", "port", "8080",
                            "v1.2.3", "notes"]


def test_unfolded_tokens_are_the_same_tokens_with_their_capitals() -> None:
    text = "FastAPI's `APIRouter` mounts App.get at /Items/{id} \u2014 ＦＵＬＬwidth too"
    kept = tokens(text, fold=False)
    assert "APIRouter" in kept and "FastAPI" in kept
    assert [t.casefold() for t in kept] == tokens(text)


def test_names_are_capitalised_words_past_the_first_and_identifiers() -> None:
    question = "How does the HorizontalPodAutoscaler use pool_size over HTTP/3 with 413 errors?"
    assert names(question) == ["HorizontalPodAutoscaler", "pool_size", "HTTP/3", "413"]


def test_bm25_words_are_stems_without_stopwords_and_identifiers_count_as_their_parts() -> None:
    assert index_terms("Setting the max_tokens") == ["set", "max_tokens", "max", "token"]
    assert index_terms("Running the pumps") == index_terms("run pump")


def test_a_question_names_an_identifier_whole_and_a_passage_matches_it_in_words() -> None:
    assert query_terms("response_model_exclude_unset") == ["response_model_exclude_unset"]
    assert {"respons", "model", "exclud", "unset"} <= terms("response_model_exclude_unset")
    assert {"dev", "depend"} <= terms("devDependencies")


def test_content_words_drop_function_words_and_fold_plurals() -> None:
    assert content_words("Where are the ports of the servers?") == {"port", "server"}


TEXT = "Name one file, e.g. Robots or Sitemaps will do. Then build the whole site again."


def test_e_g_ends_no_sentence_in_text() -> None:
    assert split_sentences(TEXT) == ["Name one file, e.g. Robots or Sitemaps will do.",
                                     "Then build the whole site again."]
    assert split_sentences("Is it, i.e. Done? Yes. Compare vs. Other, cf. There!") == [
        "Is it, i.e. Done?", "Yes.", "Compare vs. Other, cf. There!"]


def test_e_g_ends_no_sentence_in_a_quote() -> None:
    assert quotable_sentences(TEXT + "\n") == split_sentences(TEXT)


def test_e_g_ends_no_piece_of_a_line_too_long_for_the_encoder() -> None:
    line = "Then go now. Name it, e.g. Robots please."
    pieces = split_line(line, lambda text: len(text.split()), 6)
    assert [line[start:end] for start, end, _ in pieces] == ["Then go now.",
                                                             "Name it, e.g. Robots please."]
