"""The orchestrator: the prompt fits the context, and only verified statements come out."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.errors import CitationError
from rag.generator.backends import GenerationResult, ModelAnswer, ModelStatement, build_prompt
from rag.indexer.indexing import build_index
from rag.pipeline import INSUFFICIENT, Pipeline
from rag.retriever.evidence import token_counter
from rag.retriever.retrieval import Retriever
from rag.stores import folder as store

PORT_QUESTION = "Which port does the HTTP API listen on by default?"


def _pipeline(docs: Path, tmp_path: Path, settings: Settings, embedder, generator: str):
    build_index(docs, tmp_path / "index", settings, embedder)
    retriever = Retriever(store.load(tmp_path / "index"), embedder, settings.retrieval)
    return Pipeline(tmp_path / "index", settings, generator=generator, retriever=retriever)


class Scripted:
    """A generator that answers what the test tells it to (the model's side of the contract)."""

    name = "scripted"

    def __init__(self, statements: list[tuple[str, list[str]]] | list[tuple[str, list[str], str]],
                 insufficient: bool = False):
        self.answer = ModelAnswer(
            statements=[ModelStatement(text=s[0], evidence=s[1], quote=s[2] if len(s) > 2 else "")
                        for s in statements],
            insufficient_evidence=insufficient)
        self.prompts: list[list[dict]] = []

    def generate(self, question, evidence):
        self.prompts.append(build_prompt(question, evidence))
        return GenerationResult(self.answer, prompt_tokens=10, completion_tokens=5, attempts=1,
                                model="scripted")


@pytest.mark.parametrize("generator", ["openai", "local"])
def test_the_prompt_fits_the_model_context_by_construction(docs, tmp_path, settings, embedder,
                                                           generator):
    # many long sections, so the evidence budget is what stops selection
    for i in range(12):
        body = "\n\n".join(f"Port {8000 + i} paragraph {j}: " + "listen socket bind " * 40
                           for j in range(6))
        (docs / f"long-{i}.md").write_text(f"# Long page {i}\n\n{body}\n", encoding="utf-8")
    settings.retrieval.k = 40
    settings.evidence.max_per_source = 3
    pipeline = _pipeline(docs, tmp_path, settings, embedder, generator)
    question = "Which port does the server listen on and bind to? " * 8
    hits = pipeline.retriever.search(question)
    selection = pipeline.select(question, hits, frozenset())
    assert selection.truncated  # the budget, not the hits, ran out
    count = token_counter(settings.evidence.encoding)
    prompt_tokens = sum(count(m["content"]) + 8 for m in build_prompt(question, selection.evidence))
    ratio = settings.generation.local_token_ratio if generator == "local" else 1.0
    gen = settings.generation
    assert prompt_tokens * ratio + gen.max_tokens <= gen.context_tokens


def test_only_verified_supported_statements_reach_the_answer(docs, tmp_path, settings,
                                                             embedder):
    pipeline = _pipeline(docs, tmp_path, settings, embedder, "scripted")
    scripted = Scripted([])
    pipeline._generator = scripted
    hits = pipeline.retriever.search(PORT_QUESTION)
    selected = pipeline.select(PORT_QUESTION, hits, frozenset()).evidence
    ports = next(e for e in selected if "8080" in e.chunk.text)
    label = ports.label
    scripted.answer = ModelAnswer(statements=[
        ModelStatement(text="The HTTP API listens on port 8080.", evidence=[label],
                       quote="8080 | HTTP API and web interface"),
        ModelStatement(text="Database passwords rotate every night.", evidence=[label],
                       quote="8080 | HTTP API and web interface"),
    ], insufficient_evidence=False)
    answer = pipeline.ask(PORT_QUESTION)
    assert answer.answer == "The HTTP API listens on port 8080."
    assert [c.source_path for c in answer.citations] == ["server-ports.md"]
    assert not answer.extractive_fallback
    assert answer.label_checks == {"labels_cited": 2, "labels_verified": 2}


def test_unknown_labels_fall_back_to_an_extractive_answer_or_fail(docs, tmp_path, settings,
                                                                  embedder):
    pipeline = _pipeline(docs, tmp_path, settings, embedder, "scripted")
    pipeline._generator = Scripted([("The HTTP API listens on port 8080.", ["E99"])])
    answer = pipeline.ask(PORT_QUESTION)
    assert answer.extractive_fallback and answer.citations
    assert answer.label_checks == {"labels_cited": 1, "labels_verified": 0}
    shown = {e.label for e in answer.evidence}
    assert all(c.label in shown for c in answer.citations)
    settings.verification.extractive_fallback = False
    with pytest.raises(CitationError, match="E99"):
        pipeline.ask(PORT_QUESTION)


def test_model_abstention_and_the_coverage_gate(docs, tmp_path, settings, embedder):
    settings.verification.abstention = "coverage"
    pipeline = _pipeline(docs, tmp_path, settings, embedder, "scripted")
    scripted = Scripted([], insufficient=True)
    pipeline._generator = scripted
    answer = pipeline.ask(PORT_QUESTION)
    assert answer.insufficient_evidence and answer.answer == INSUFFICIENT
    assert not answer.citations and len(scripted.prompts) == 1
    # nothing in the docs covers this question: no model call at all
    answer = pipeline.ask("Does the orchestrator support quantum blockchain federation?")
    assert answer.insufficient_evidence and len(scripted.prompts) == 1


def _extractive(docs, tmp_path, settings, embedder):
    settings.verification.abstention = "off"
    return _pipeline(docs, tmp_path, settings, embedder, "extractive")


def test_extractive_citations_name_exactly_the_quoted_lines(docs, tmp_path, settings, embedder):
    from rag.interfaces.render import render_answer

    pipeline = _extractive(docs, tmp_path, settings, embedder)
    answer = pipeline.ask("Which address does Tidewatch bind to by default?")
    assert "127.0.0.1" in answer.answer
    file_lines = (docs / "server-ports.md").read_text(encoding="utf-8-sig").splitlines()
    by_label = {e.label: e.chunk for e in answer.evidence}
    for c in answer.citations:
        chunk = by_label[c.label]
        assert chunk.start_line <= c.start_line <= c.end_line <= chunk.end_line
    c = next(c for c in answer.citations if c.source_path == "server-ports.md")
    quoted = "\n".join(file_lines[c.start_line - 1:c.end_line])
    assert "By default Tidewatch binds" in quoted
    assert c.end_line - c.start_line < 3  # the sentence's lines, not the whole section
    rendered = render_answer(answer, docs)
    assert f"server-ports.md:{c.start_line}-{c.end_line}" in rendered
    assert f"{c.start_line:>5} | {file_lines[c.start_line - 1]}" in rendered
    json_cite = next(d for d in answer.to_dict()["citations"] if d["label"] == c.label)
    assert (json_cite["start_line"], json_cite["end_line"]) == (c.start_line, c.end_line)


def test_model_statements_are_cited_at_the_lines_they_quote(docs, tmp_path, settings, embedder):
    pipeline = _extractive(docs, tmp_path, settings, embedder)
    hits = pipeline.retriever.search(PORT_QUESTION)
    selected = pipeline.select(PORT_QUESTION, hits, frozenset()).evidence
    ports = next(e for e in selected if "Ports below 1024" in e.chunk.text)
    pipeline._generator = Scripted([
        ("Ports below 1024 need root or the `CAP_NET_BIND_SERVICE` capability.", [ports.label]),
        ("Low ports need root or an extra capability.", [ports.label],  # a paraphrase
         "Ports below 1024 need root"),
        ("Low ports need root or an extra capability.", [ports.label]),  # no quote
        ("Low ports need root or an extra capability.", [ports.label],
         "Ports under 1024 need root"),  # a quote with a changed word
    ])
    pipeline.generator_name = "scripted"
    settings.verification.unsupported = "mark"
    answer = pipeline.ask(PORT_QUESTION)
    verbatim, paraphrase = answer.statements
    lines = (docs / "server-ports.md").read_text(encoding="utf-8-sig").splitlines()
    start, end = verbatim.citations[0].start_line, verbatim.citations[0].end_line
    assert "Ports below 1024" in lines[start - 1] and "CAP_NET_BIND_SERVICE" in lines[end - 1]
    assert (paraphrase.citations[0].start_line, paraphrase.citations[0].end_line) == (
        start, start)
    unquoted, misquoted = answer.to_dict()["unsupported"]
    assert "not in the cited evidence" in unquoted["reason"]
    assert "'Ports under 1024 need root'" in misquoted["reason"]


def test_the_abstention_model_decides_before_any_model_call(docs, tmp_path, settings,
                                                            embedder):
    import json

    from rag.core.errors import ConfigError

    never = tmp_path / "never.json"
    never.write_text(json.dumps({"features": ["union_coverage"], "mean": [0.0], "scale": [1.0],
                                 "weights": [0.0], "bias": -20.0, "threshold": 0.5}))
    settings.verification.abstention_model = str(never)
    pipeline = _pipeline(docs, tmp_path, settings, embedder, "scripted")
    scripted = Scripted([("The HTTP API listens on port 8080.", ["E1"])])
    pipeline._generator = scripted
    answer = pipeline.ask(PORT_QUESTION)
    assert answer.insufficient_evidence and not scripted.prompts  # no model call at all
    assert answer.to_dict()["abstention"]["p_answerable"] < 0.5
    settings.verification.abstention = "off"
    assert not pipeline.ask(PORT_QUESTION).insufficient_evidence
    settings.verification.abstention = "model"
    never.write_text("{}")
    pipeline._abstention = None
    with pytest.raises(ConfigError, match="abstention_model"):
        pipeline.ask(PORT_QUESTION)


def test_an_ask_embeds_its_question_once(docs, tmp_path, settings):
    """The search's question vector is the one the evidence is scored against: embedding
    the question again would cost a first ask a tenth of its time."""
    from rag.indexer.embedding import FakeEmbedder

    embedder = FakeEmbedder(name="fake-embedder-asked-once")  # no vector cached for it yet
    pipeline = _extractive(docs, tmp_path, settings, embedder)
    question = "Which address does Tidewatch bind to by default?"
    seen: list[str] = []
    embed = embedder.embed_batch

    def recording(texts):
        seen.extend(texts)
        return embed(texts)

    embedder.embed_batch = recording
    answer = pipeline.ask(question)
    assert "127.0.0.1" in answer.answer
    assert seen.count(question) == 1
    assert len(seen) > 1  # and the evidence sentences were embedded, against that vector
