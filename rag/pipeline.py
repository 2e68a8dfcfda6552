"""The thin orchestrator: index, retrieve, select evidence, generate, verify.

Indexing (``rag.indexer.indexing.run_index``) is a stage of its own; this module asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from rag.core.config import Settings
from rag.core.errors import CitationError, ModelOutputError
from rag.core.records import Answer, Citation, Evidence, SearchHit, Statement
from rag.retriever.retrieval import Retriever

if TYPE_CHECKING:
    from rag.answer.abstention import AbstentionModel
    from rag.answer.scoring import PassageScorer
    from rag.generator.base import GenerationResult, Generator, ReadOn
    from rag.indexer.embedding import Embedder
    from rag.retriever.evidence import Selection

INSUFFICIENT = "Insufficient evidence: the docs shown do not answer this question."
# Generators that quote the evidence: their answers are already extractive, never replaced.
QUOTING = ("extractive", "passage")
# Told each stage's result as it is ready: ("hits", hits), ("evidence", evidence),
# ("statement", statement) per verified statement. Raising in it stops the work there.
OnEvent = Callable[[str, Any], None]


def open_retriever(
    index_root: Path, settings: Settings, embedder: Embedder | None = None
) -> Retriever:
    """Load the live index version and the query embedder (no torch with the ONNX backend)."""
    from rag.indexer.embedding import make_embedder
    from rag.stores import open_index

    version = open_index(index_root, settings)
    embedder = embedder or make_embedder(settings.embedding,
                                         threads=settings.embedding.query_threads)
    return Retriever(version, embedder, settings.retrieval, settings.index)


class Pipeline:
    """Retriever, tokenizer and generator built once, for many questions (CLI, eval, server).

    Use as a context manager: a local model server it started is stopped on exit.
    """

    def __init__(self, index_root: Path, settings: Settings, *, generator: str | None = None,
                 retriever: Retriever | None = None) -> None:
        from rag.retriever.evidence import token_counter

        self.settings = settings
        self.retriever = retriever or open_retriever(index_root, settings)
        self.count = token_counter(settings.evidence.encoding)
        self.generator_name = generator or settings.generation.generator
        self._generator: Generator | None = None
        self._abstention: AbstentionModel | None = None
        self._scorer: PassageScorer | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        close = getattr(self._generator, "close", None)
        self._generator = None
        if close is not None:
            close()

    def generator(self) -> Generator:
        """Built on first use, so retrieval-only work never starts a model."""
        if self._generator is None:
            from rag.generator.backends import make_generator

            self._generator = make_generator(self.settings, self.generator_name,
                                             embedder=self._embedder())
        return self._generator

    def _embedder(self) -> Embedder | None:
        """The retriever's embedder (a stand-in retriever may have none: words only then)."""
        return getattr(self.retriever, "embedder", None)

    def scorer(self) -> PassageScorer:
        """Scores evidence sentences against the question (abstention, extractive answers)."""
        if self._scorer is None:
            from rag.answer.scoring import PassageScorer

            self._scorer = PassageScorer(self._embedder())
        return self._scorer

    def abstention_signals(self, question: str, evidence: Sequence[Evidence],
                           groups: frozenset[str]) -> dict[str, float]:
        """What the abstention model reads: the best dense hits, coverage, and how well the
        best evidence passage matches (see rag.answer.abstention)."""
        from rag.answer.abstention import DENSE_K, signals
        from rag.core.text import index_terms

        passages = self.scorer().passages(question, evidence)
        # Word rarity among the chunks these groups may see only: counts over every chunk
        # would let a restricted page's words change whether an outsider gets an answer.
        counts = getattr(self.retriever, "document_frequencies", None)
        frequency, size = counts(index_terms(question), groups) if counts else (None, 0)
        dense = self.retriever.search(question, k=DENSE_K, mode="dense", groups=groups)
        return signals(question, evidence, passages, dense, frequency, size)

    def answerable(self, question: str, evidence: Sequence[Evidence],
                   groups: frozenset[str]) -> tuple[bool, dict[str, float]]:
        """The code-side abstention decision (verification.abstention) and its signals."""
        mode = self.settings.verification.abstention
        if mode == "off":
            return True, {}
        if mode == "model" and self._abstention is None:
            from rag.answer.abstention import load_model

            self._abstention = load_model(self.settings.verification.abstention_model)
        fitted_for = self._abstention.embedding_model if self._abstention else ""
        embedder = self._embedder()
        if mode == "coverage" or embedder is None or fitted_for not in ("", embedder.name):
            coverage = _coverage(question, tuple(evidence))
            return coverage >= self.settings.verification.min_question_coverage, {
                "coverage": coverage}
        assert self._abstention is not None
        values = self.abstention_signals(question, evidence, groups)
        p = self._abstention.probability(values)
        return p >= self._abstention.threshold, {**values, "p_answerable": round(p, 4)}

    def read_on(self, groups: frozenset[str]) -> ReadOn | None:
        """Reads an Evidence item on into its section's next chunk, for these groups (a
        quote that stopped where its hit ended goes on); None: this retriever cannot."""
        longer = getattr(self.retriever, "read_on", None)
        if longer is None:
            return None

        def read(ev: Evidence) -> Evidence | None:
            hit = longer(ev.hit, groups)
            return Evidence(ev.label, hit) if hit is not None else None

        return read

    def select(self, question: str, hits: Sequence[SearchHit],
               groups: frozenset[str]) -> Selection:
        from rag.retriever.evidence import evidence_budget, select_evidence

        if self.generator_name == "local":  # its own, smaller window and tokenizer
            from rag.generator.local.model import local_evidence_budget

            budget = local_evidence_budget(self.settings, self.count(question))
        else:
            budget = evidence_budget(self.settings) - self.count(question)
        return select_evidence(hits, budget_tokens=max(budget, 0),
                               max_per_source=self.settings.evidence.max_per_source,
                               count_tokens=self.count, allowed_groups=groups)

    def ask(self, question: str, *, mode: str | None = None, groups: Iterable[str] = (),
            on_event: OnEvent | None = None) -> Answer:
        """The whole pipeline; only verified, supported statements reach the Answer.

        ``on_event`` (streaming) hears each stage's result as it is ready, and ``generate``
        (no value) just before the model is called: a stream whose client has left stops
        there, before the one costly stage.
        """
        groups = frozenset(groups)
        emit: OnEvent = on_event or (lambda kind, value: None)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        hits = self.retriever.search(question, mode=mode, groups=groups)
        timings["retrieve"] = time.perf_counter() - t0
        emit("hits", tuple(hits))

        t0 = time.perf_counter()
        selection = self.select(question, hits, groups)
        evidence = selection.evidence
        timings["evidence"] = time.perf_counter() - t0
        emit("evidence", evidence)
        name = self.generator_name
        base: dict[str, Any] = {
            "question": question, "evidence": evidence,
            "excluded": selection.excluded,
            "generator": name, "timings": timings, "hits": tuple(hits),
        }
        if not evidence:
            return Answer(answer=INSUFFICIENT, statements=(), citations=(),
                          insufficient_evidence=True, **base)
        t0 = time.perf_counter()
        searched = getattr(self.retriever, "embed_query", None)
        if searched is not None and self._embedder() is not None:  # the vector search made
            self.scorer().remember(question, searched(question))
        ok, base["abstention"] = self.answerable(question, evidence, groups)
        timings["abstain"] = time.perf_counter() - t0
        if not ok:
            return Answer(answer=INSUFFICIENT, statements=(), citations=(),
                          insufficient_evidence=True, **base)

        emit("generate", None)
        t0 = time.perf_counter()
        generator = self.generator()
        use_embedder = getattr(generator, "use_embedder", None)
        embedder = self._embedder()
        if use_embedder is not None and embedder is not None:  # built elsewhere (server)
            use_embedder(embedder)
        result: GenerationResult | None
        read_on = self.read_on(groups)
        reading = {"read_on": read_on} if getattr(generator, "reads_on", False) else {}
        try:
            result = generator.generate(question, evidence, **reading)  # type: ignore[attr-defined]
        except ModelOutputError:  # cut off, or never in the answer format
            if name in QUOTING or not self.settings.verification.extractive_fallback:
                raise
            result = None  # as for an answer that fails verification: _verified falls back
        timings["generate"] = time.perf_counter() - t0
        tokens = {"prompt": result.prompt_tokens if result else 0,
                  "completion": result.completion_tokens if result else 0}
        labels = [label for s in result.answer.statements for label in s.evidence] \
            if result else []
        shown = {e.label for e in evidence}
        checks = {"labels_cited": len(labels),
                  "labels_verified": sum(label in shown for label in labels)}

        t0 = time.perf_counter()
        statements, fallback, base["evidence"] = _verified(
            result, evidence, self.settings, groups, question, name, self._embedder(), read_on)
        timings["verify"] = time.perf_counter() - t0
        supported = tuple(s for s in statements if s.supported)
        for statement in supported:
            emit("statement", statement)
        unsupported = tuple(s for s in statements if not s.supported)
        shown_unsupported = unsupported if self.settings.verification.unsupported == "mark" else ()
        common = {"unsupported": shown_unsupported, "extractive_fallback": fallback,
                  "tokens": tokens, "label_checks": checks, **base}
        if not supported:
            return Answer(answer=INSUFFICIENT, statements=(), citations=(),
                          insufficient_evidence=True, **common)
        return Answer(
            answer=_join(s.text for s in supported),
            statements=supported,
            citations=_unique(c for s in supported for c in s.citations),
            insufficient_evidence=False,
            **common,
        )


def _coverage(question: str, evidence: tuple[Evidence, ...]) -> float:
    """Best share of the question's content words that one evidence chunk holds."""
    from rag.verifier.verification import support_score

    return max(support_score(question, [e]) for e in evidence)


def _verified(
    result: GenerationResult | None, evidence: tuple[Evidence, ...], settings: Settings,
    groups: frozenset[str], question: str, name: str, embedder: Embedder | None = None,
    read_on: ReadOn | None = None,
) -> tuple[list[Statement], bool, tuple[Evidence, ...]]:
    """Check the model's statements; fall back to an extractive answer if none survive, or
    if the model's output was unusable (``result`` None). Each answer is checked against
    the evidence its quotes were read from (a hit read on, for the extractive one), which
    is returned with the statements."""
    from rag.generator.extractive import ExtractiveGenerator
    from rag.verifier.verification import check_support

    threshold = settings.verification.support_threshold

    def check(generated: GenerationResult) -> list[Statement]:
        answer = generated.answer
        if answer.insufficient_evidence:
            return []
        pairs = [(s.text, s.evidence) for s in answer.statements]
        return check_support(pairs, generated.evidence or evidence, threshold=threshold,
                             allowed_groups=groups, quotes=generated.quotes,
                             quoted=[s.quote for s in answer.statements])

    try:
        statements = check(result) if result else []
        failed = not any(s.supported for s in statements)
    except CitationError:
        if not settings.verification.extractive_fallback or name in QUOTING:
            raise
        statements, failed = [], True
    given = (result.evidence if result else None) or evidence
    if (not failed or name in QUOTING or not settings.verification.extractive_fallback
            or result and result.answer.insufficient_evidence):
        return statements, False, given
    quoted = ExtractiveGenerator(embedder).generate(question, evidence, read_on=read_on)
    extractive = check(quoted)
    if not any(s.supported for s in extractive):
        return statements, False, given
    return extractive, True, quoted.evidence or evidence


def _join(texts: Iterable[str]) -> str:
    """Statements joined into one answer; quotes holding code keep their lines."""
    parts = list(texts)
    return ("\n\n" if any("\n" in t for t in parts) else " ").join(parts)


def _unique(citations: Iterable[Citation]) -> tuple[Citation, ...]:
    seen: dict[tuple[str, int, int], Citation] = {}
    for c in citations:
        seen.setdefault((c.label, c.start_line, c.end_line), c)
    return tuple(seen.values())
