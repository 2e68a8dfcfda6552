"""The embedded llama.cpp server with the real model (slow): its answers, the grammar it
enforces, stopping it, a bad model file. A stand-in server: tests/test_local_model.py."""

# ruff: noqa: F811 - a test takes the model_file fixture imported from tests/test_local_model.py
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.core.config import GenerationSettings
from rag.core.errors import GenerationError
from rag.generator.backends import ModelAnswer, OpenAIGenerator, build_prompt
from rag.generator.local.model import (
    LOCAL_QUOTE,
    LOCAL_SENTENCE,
    LOCAL_STATEMENTS,
    LocalModelServer,
    local_answer_schema,
    served_models,
)
from rag.verifier.verification import check_support
from tests.test_local_model import (
    _evidence,
    cache_home,  # noqa: F401 - its autouse fixture applies here too
    gone,
    model_file,  # noqa: F401 - a fixture: pytest finds it by name
)


@pytest.fixture(scope="module")
def real_server(q4_0_model: Path) -> Iterator[LocalModelServer]:
    # the model as users run it: the Q4_0 copy of the bundled file (rag.generator.local.model_file)
    server = LocalModelServer(str(q4_0_model), n_ctx=2048)
    with server:
        yield server


@pytest.mark.slow
def test_real_model_answers_with_shown_labels_only(real_server: LocalModelServer) -> None:
    evidence = [
        _evidence("E1", "The server listens on port 8080 by default. Use --port to change it."),
        _evidence("E2", "Install the package with pip install foo.", path="guide/install.md"),
    ]
    settings = GenerationSettings(max_tokens=200, timeout_s=180, retries=1)
    with OpenAIGenerator(settings, base_url=real_server.base_url, structured="llguidance",
                         schema=local_answer_schema) as gen:
        result = gen.generate("Which port does the server listen on by default?", evidence)
    labels = {label for s in result.answer.statements for label in s.evidence}
    assert labels <= {"E1", "E2"}
    assert result.prompt_tokens > 100 and result.completion_tokens > 0
    # Its statements go through the quote check like any model's: kept ones are cited at
    # the lines their quote stands on, the others say why they were refused.
    statements = result.answer.statements
    checked = check_support([(s.text, s.evidence) for s in statements], evidence,
                            threshold=0.5, quoted=[s.quote for s in statements])
    for model_statement, statement in zip(statements, checked, strict=True):
        assert statement.quote == (model_statement.quote or model_statement.text)
        assert statement.supported != bool(statement.reason), statement
        if statement.supported:
            chunk = next(e.chunk for e in evidence if e.label == statement.citations[0].label)
            assert statement.quote.split()[0] in chunk.text


@pytest.mark.slow
def test_real_server_enforces_the_grammar(real_server: LocalModelServer) -> None:
    # llama.cpp drops a grammar it cannot build without a word, so check the output obeys it:
    # compact JSON, sentences, one shown label each, and the flag consistent with them.
    import openai

    evidence = [_evidence("E1", "The server listens on port 8080. Use --port to change it."),
                _evidence("E2", "Async Tests > HTTPX\n\nEvidence E1", path="a.md")]
    grammar = "%llguidance {}\nstart: %json " + json.dumps(local_answer_schema(["E1", "E2"]))
    client = openai.OpenAI(base_url=real_server.base_url, api_key="none", max_retries=0)
    questions = ["Which port does the server listen on?",
                 "How do I test async code with HTTPX?"]
    for question in questions:
        response = client.chat.completions.create(
            model="any", messages=build_prompt(question, evidence), max_tokens=200,
            temperature=0, extra_body={"grammar": grammar})
        content = response.choices[0].message.content or ""
        assert "\n" not in content
        assert re.match(r'\{"statements":\[(\{"text":"[A-Z`]|\],"insufficient_evidence":true)',
                        content), content
        if response.choices[0].finish_reason == "length":
            continue  # cut off mid-sentence (the caller retries); what was written obeyed
        answer = ModelAnswer.model_validate_json(content)
        assert answer.insufficient_evidence == (not answer.statements)
        assert len(answer.statements) <= LOCAL_STATEMENTS
        for statement in answer.statements:
            assert re.match(LOCAL_SENTENCE, statement.text), statement.text
            assert re.match(LOCAL_QUOTE, statement.quote), statement.quote
            assert len(statement.evidence) == 1 and statement.evidence[0] in {"E1", "E2"}
    client.close()


@pytest.mark.slow
def test_real_server_is_gone_after_stop(real_server: LocalModelServer) -> None:
    process = real_server.process
    assert process is not None
    real_server.stop()
    assert process.poll() is not None and gone(process.pid)
    assert served_models(real_server.base_url) is None


@pytest.mark.slow
def test_real_server_reports_a_bad_model_file(model_file: str) -> None:
    server = LocalModelServer(model_file)
    with pytest.raises(GenerationError) as err:
        server.start(timeout_s=60)
    assert str(err.value) == ("local model server exited during start-up (code 1): error: "
                              f"llama.cpp could not load {model_file} or listen on port "
                              f"{server.port}")
    assert server.process is None
