"""Question analysis: the parts of a question that asks several things, and their kinds."""

from __future__ import annotations

from rag.answer.questions import answer_kinds, defined_terms, question_parts
from rag.core.text import query_terms, stem, terms


def test_a_question_in_two_parts_is_split_at_and_which() -> None:
    parts = question_parts("How do I stream events from an endpoint, e.g. for a chat, "
                           "and which version added it?")
    assert [p.text for p in parts] == ["How do I stream events from an endpoint, e.g. for a chat",
                                       "which version added it?"]
    assert "version" in parts[1].kinds and "version" not in parts[0].kinds


def test_scene_setting_sentences_are_context_not_parts() -> None:
    question = ("I mounted a second app under /subapi. Where are its docs, and will its "
                "startup code run?")
    assert [p.terms for p in question_parts(question)] == [("doc",), ("startup", "code", "run")]


def test_a_question_that_asks_one_thing_has_no_parts() -> None:
    assert question_parts("How do I make a query parameter required?") == []
    assert question_parts("The docs say X. Why?") == []  # "Why?" has no word of its own
    assert question_parts("Should I use Flask and Django together?") == []


def test_kinds_of_answer() -> None:
    assert answer_kinds("How many workers run by default?") >= {"number", "code"}
    assert answer_kinds("Since which version is this possible?") == {"version"}
    # What is asked decides, wherever the scene ends: "What option...?" after two sentences.
    assert "code" in answer_kinds("Nginx strips the /api/v1 prefix. The docs page breaks. "
                                  "What option fixes this?")
    assert "reason" in answer_kinds("The server drops my header. Why does it do that?")
    assert "code" not in answer_kinds("The server drops my header. Does it log that?")


def test_what_is_x_asks_for_a_definition_of_x() -> None:
    assert answer_kinds("What is a leaf bundle?") == {"definition"}
    assert defined_terms("What's a leaf bundle") == {"leaf", "bundl"}
    assert defined_terms("What does idempotent mean?") == {"idempot"}
    assert answer_kinds("What does the base option do?") == {"definition"}
    assert defined_terms("What does the base option do?") == {"base", "option"}
    # A long "what is ..." asks about something else; "which" never asks for a definition.
    assert defined_terms("What is the naming scheme for environment variables that "
                         "override settings?") == frozenset()
    assert "definition" not in answer_kinds("Which port does the server listen on?")


def test_a_clause_with_no_words_of_its_own_asks_about_the_scene() -> None:
    question = ("My pattern with a lookahead worked in v1 but fails in v2. Why, and can I go "
                "back to Python's regex engine?")
    parts = question_parts(question)
    assert [p.text for p in parts] == ["Why", "can I go back to Python's regex engine?"]
    assert "lookahead" in parts[0].terms and "reason" in parts[0].kinds
    assert question_parts("The docs say X. Why?") == []  # one thing asked: no parts


def test_what_do_i_need_to_install_asks_for_code() -> None:
    assert "code" in answer_kinds("What do I need to install to use email validation?")
    assert "code" not in answer_kinds("What do I need to know about workers?")


def test_a_yes_or_no_question_asks_for_a_polar_answer() -> None:
    assert "polar" in answer_kinds("Will it also lowercase strings inside a nested model?")
    assert "polar" in answer_kinds("I set str_to_lower. Does it apply to nested models?")
    assert "polar" not in answer_kinds("Is there a way to skip validation?")  # asks how
    assert "polar" not in answer_kinds("Can I skip validation?")
    assert "polar" in answer_kinds("Should I mount StaticFiles, or is there something better?")
    assert "polar" not in answer_kinds("What should I install to fix that?")


def test_a_qualified_name_also_asks_for_the_attribute_it_ends_in() -> None:
    asked = set(query_terms("What does templates.TemplateResponse take?"))
    assert asked & terms("Return a `TemplateResponse` with the request.")
    assert "compare_digest" in query_terms("Why secrets.compare_digest() and not ==?")
    # A file name, a version, a path or a URL names no attribute.
    for question, word in [("Where does main.py go?", "py"), ("What changed in 0.108.0?", "0"),
                           ("Is config.json read?", "json"), ("See docs.python.org/3/", "org")]:
        assert word not in query_terms(question)


def test_a_camel_case_name_also_counts_as_its_words() -> None:
    found = terms("Install the packages as `devDependencies` or set `envPrefix`.")
    assert {"dev", stem("dependencies"), "env", stem("prefix")} <= found
    assert {"dev", stem("dependencies")} & terms("Install the packages as dependencies.") == {
        stem("dependencies")}


def test_what_happens_asks_for_an_effect() -> None:
    assert "effect" in answer_kinds("What happens if I misspell a setting name?")
    assert "effect" in answer_kinds("The request has no header. What will happen?")
    assert "effect" not in answer_kinds("What does the base option do?")
