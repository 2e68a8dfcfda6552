"""The OpenAI backend against a server that floods, rate-limits or is not a model at all."""

from __future__ import annotations

import json
import time
from email.utils import formatdate

import pytest

from rag.core.errors import GenerationError
from rag.generator.backends import (
    GenerationResult,
    OpenAIGenerator,
    UnknownLabelError,
    answer_schema,
    parse_answer,
)
from tests.fakes.fake_openai_server import FakeOpenAIServer, Reply, answer_json
from tests.test_generation import EVIDENCE, GOOD, QUESTION, settings


def generate(replies: list[Reply], **overrides: object,
             ) -> tuple[FakeOpenAIServer, list[float], GenerationResult | GenerationError]:
    """Run once against a fake server; the sleeps between attempts are recorded, not slept."""
    slept: list[float] = []
    with FakeOpenAIServer(replies) as server, OpenAIGenerator(
            settings(**overrides), base_url=server.base_url, backoff_s=0.0,
            sleep=slept.append) as gen:
        try:
            return server, slept, gen.generate(QUESTION, EVIDENCE)
        except GenerationError as exc:
            return server, slept, exc


def statements(n: int, text: str = "The server listens on port 8080 by default.") -> str:
    return answer_json([(text, ["E1"])] * n)


# --- Retry-After ---------------------------------------------------------------------------


@pytest.mark.parametrize("header, at_least", [("3", 3.0), ("0.5", 0.5), ("12", 12.0)])
def test_retry_after_on_429_is_waited_before_the_next_attempt(header: str, at_least: float):
    server, slept, result = generate(
        [Reply(status=429, headers=(("Retry-After", header),)), Reply(GOOD)], timeout_s=60.0)
    assert isinstance(result, GenerationResult) and result.attempts == 2
    assert len(slept) == 1 and slept[0] >= at_least
    assert len(server.requests) == 2


def test_retry_after_as_an_http_date_is_understood():
    when = formatdate(time.time() + 5, usegmt=True)
    _, slept, result = generate([Reply(status=429, headers=(("Retry-After", when),)),
                                 Reply(GOOD)])
    assert isinstance(result, GenerationResult)
    assert 3.0 <= slept[0] <= 6.0  # whole seconds in the header, a second of slack


def test_retry_after_longer_than_the_cap_fails_at_once_with_one_line():
    server, slept, error = generate([Reply(status=429, headers=(("Retry-After", "120"),))],
                                    retries=3, timeout_s=60.0)
    assert isinstance(error, GenerationError) and error.exit_code == 7
    assert str(error) == (f"model endpoint {server.base_url} kept rate-limiting (HTTP 429); it "
                          "asks to retry after 120s, more than the 30s this command waits")
    assert slept == [] and len(server.requests) == 1


def test_retry_after_longer_than_the_timeout_fails_at_once():
    server, slept, error = generate([Reply(status=429, headers=(("Retry-After", "8"),))],
                                    timeout_s=5.0)
    assert isinstance(error, GenerationError) and "more than the 5s" in str(error)
    assert slept == [] and len(server.requests) == 1


def test_429_without_retry_after_keeps_the_short_backoff():
    _, slept, result = generate([Reply(status=429), Reply(GOOD)])
    assert isinstance(result, GenerationResult) and slept == [0.0]


def test_unreadable_retry_after_is_ignored():
    _, slept, result = generate([Reply(status=429, headers=(("Retry-After", "soon"),)),
                                 Reply(GOOD)])
    assert isinstance(result, GenerationResult) and slept == [0.0]


# --- statement caps ------------------------------------------------------------------------


def test_flood_of_statements_is_invalid_output_not_an_answer():
    flood = statements(20_000)
    server, _, error = generate([Reply(flood)])
    assert isinstance(error, GenerationError) and error.exit_code == 7
    assert str(error) == f"model output is too long ({len(flood)} characters) after 2 attempts"
    assert len(server.requests) == 2


@pytest.mark.parametrize("count, most, ok", [(5, 5, True), (6, 5, False), (8, 8, True),
                                             (9, 8, False), (1, 1, True)])
def test_statement_count_is_capped_by_config(count: int, most: int, ok: bool):
    server, _, outcome = generate([Reply(statements(count))], max_statements=most)
    schema = server.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["statements"]["maxItems"] == most
    if ok:
        assert isinstance(outcome, GenerationResult)
        assert len(outcome.answer.statements) == count
    else:
        assert isinstance(outcome, GenerationError) and outcome.exit_code == 7
        assert str(outcome) == (f"model output has {count} statements, more than "
                                f"generation.max_statements={most} after 2 attempts")


def test_too_many_statements_then_a_good_answer_recovers():
    _, _, result = generate([Reply(statements(6)), Reply(GOOD)])
    assert isinstance(result, GenerationResult) and result.attempts == 2


def test_statement_length_is_capped():
    long = "Port 8080 " * 60  # 600 characters
    _, _, error = generate([Reply(statements(1, long))], max_statement_chars=200)
    assert isinstance(error, GenerationError)
    assert str(error) == ("model output has a statement of 599 characters, more than "
                          "generation.max_statement_chars=200 after 2 attempts")
    _, _, result = generate([Reply(statements(1, long))], max_statement_chars=600)
    assert isinstance(result, GenerationResult)


def test_parse_answer_checks_caps_before_labels():
    content = json.dumps({"statements": [{"text": "x y", "evidence": ["E9"]}] * 3,
                          "insufficient_evidence": False})
    with pytest.raises(ValueError, match="3 statements"):
        parse_answer(content, ["E1"], max_statements=2)
    with pytest.raises(UnknownLabelError):
        parse_answer(content, ["E1"], max_statements=3)


def test_local_grammar_schema_carries_the_cap():
    schema = answer_schema(["E1"], max_text_chars=200, max_statements=7)
    statements_schema = schema["properties"]["statements"]
    assert statements_schema["maxItems"] == 7
    assert statements_schema["items"]["properties"]["text"]["maxLength"] == 200


# --- a 200 that is not a chat completion -----------------------------------------------------


@pytest.mark.parametrize("reply, needle", [
    (Reply(raw_body=b"<html><h1>502 Bad Gateway</h1></html>", content_type="text/html"),
     "answered with a body that is not JSON"),
    (Reply(raw_body=b"<html>oops</html>"), "answered with a body that is not JSON"),
    (Reply(raw_body=b'{"object": "error"}'), "JSON without a list of choices"),
    (Reply(raw_body=b'"just a string"'), "not JSON"),
    (Reply(raw_body=b'{"choices": [{"message": {"content": 42}}]}'),
     "a choice whose content is not text"),
])
def test_non_completion_bodies_are_generation_errors(reply: Reply, needle: str):
    server, _, error = generate([reply])
    assert isinstance(error, GenerationError) and error.exit_code == 7, error
    assert needle in str(error) and str(error).endswith("after 2 attempts")
    assert "\n" not in str(error)
    assert len(server.requests) == 2  # a proxy's error page may be transient: retried


def test_non_completion_then_good_answer_recovers():
    _, _, result = generate([Reply(raw_body=b"<html>busy</html>", content_type="text/html"),
                             Reply(GOOD)])
    assert isinstance(result, GenerationResult) and result.attempts == 2
