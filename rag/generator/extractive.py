"""The extractive backend: answers by quoting the evidence (rag.answer.extractive chooses what)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag.answer.extractive import choose, read_further
from rag.answer.scoring import PassageScorer, unscored
from rag.core.records import Evidence
from rag.generator.base import GenerationResult, ModelAnswer, ModelStatement, ReadOn

if TYPE_CHECKING:
    from rag.indexer.embedding import Embedder


class ExtractiveGenerator:
    """Answers by quoting the evidence passage closest to the question (no model)."""

    name = "extractive"
    reads_on = True  # generate() takes read_on

    def __init__(self, embedder: Embedder | None = None,
                 scorer: PassageScorer | None = None) -> None:
        self.scorer = scorer or PassageScorer(embedder)

    def use_embedder(self, embedder: Embedder) -> None:
        """Score with this embedder from now on, unless one was given when built."""
        if self.scorer.embedder is None:
            self.scorer.embedder = embedder

    def generate(self, question: str, evidence: Sequence[Evidence], *,
                 read_on: ReadOn | None = None) -> GenerationResult:
        """Quote the best passage(s); each statement's quoted file lines ride along. A first
        quote that ends where its hit ends, inside a section, reads on into the section's
        next chunk where ``read_on`` gives it: what is quoted does not change, only where
        it stops (a chunk boundary is the indexer's, not the page's)."""
        quotes = choose(question, self.scorer.passages(question, evidence))
        used = tuple(evidence)
        first = next((q for q in quotes if q.first), None)
        hit = next((e for e in evidence if first and e.label == first.label), None)
        if read_on is not None and first is not None and hit is not None \
                and first.lines[1] >= hit.chunk.end_line:
            longer = read_on(hit)
            if longer is not None:
                path = {e.label: e.chunk.source_path for e in evidence}
                stop = min((q.lines[0] for q in quotes if path[q.label] == hit.chunk.source_path
                            and q.lines[0] > first.lines[1]), default=0)
                further = read_further(quotes, unscored(longer), stop)
                if further != quotes:
                    quotes = further
                    used = tuple(longer if e is hit else e for e in evidence)
        statements = [ModelStatement(text=q.text, evidence=[q.label], quote=q.text) for q in quotes]
        answer = ModelAnswer(statements=statements, insufficient_evidence=not statements)
        return GenerationResult(answer, 0, 0, 1, "extractive",
                                quotes=tuple(q.lines for q in quotes),
                                evidence=used if used != tuple(evidence) else None)
