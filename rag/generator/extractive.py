"""The extractive backend: answers by quoting the evidence (rag.answer.extractive chooses what)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag.answer.extractive import choose
from rag.answer.scoring import PassageScorer
from rag.core.records import Evidence
from rag.generator.base import GenerationResult, ModelAnswer, ModelStatement

if TYPE_CHECKING:
    from rag.indexer.embedding import Embedder


class ExtractiveGenerator:
    """Answers by quoting the evidence passage closest to the question (no model)."""

    name = "extractive"

    def __init__(self, embedder: Embedder | None = None,
                 scorer: PassageScorer | None = None) -> None:
        self.scorer = scorer or PassageScorer(embedder)

    def use_embedder(self, embedder: Embedder) -> None:
        """Score with this embedder from now on, unless one was given when built."""
        if self.scorer.embedder is None:
            self.scorer.embedder = embedder

    def generate(self, question: str, evidence: Sequence[Evidence]) -> GenerationResult:
        """Quote the best passage(s); each statement's quoted file lines ride along."""
        quotes = choose(question, self.scorer.passages(question, evidence))
        statements = [ModelStatement(text=q.text, evidence=[q.label], quote=q.text) for q in quotes]
        answer = ModelAnswer(statements=statements, insufficient_evidence=not statements)
        return GenerationResult(answer, 0, 0, 1, "extractive",
                                quotes=tuple(q.lines for q in quotes))
