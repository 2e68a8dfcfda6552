"""The passage backend: the rule-free baseline (rag.answer.passage), as a Generator."""

from __future__ import annotations

from collections.abc import Sequence

from rag.answer.passage import best_quote
from rag.core.records import Evidence
from rag.generator.base import GenerationResult, ModelAnswer, ModelStatement


class PassageGenerator:
    """Quotes the best passage of the top evidence section whole (no model, no rules)."""

    name = "passage"

    def generate(self, question: str, evidence: Sequence[Evidence]) -> GenerationResult:
        found = best_quote(question, evidence[0]) if evidence else None
        statements = ([ModelStatement(text=found[0], evidence=[evidence[0].label],
                                      quote=found[0])]
                      if found else [])
        answer = ModelAnswer(statements=statements, insufficient_evidence=not statements)
        return GenerationResult(answer, 0, 0, 1, "passage",
                                quotes=(found[1],) if found else ())
