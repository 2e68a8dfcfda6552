"""The thin orchestrator: index, retrieve, select evidence, generate, verify."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from rag.config import Settings
from rag.errors import CitationError
from rag.records import Answer, Citation, Evidence, SearchHit, Statement
from rag.retrieval import Retriever

if TYPE_CHECKING:
    from rag.embedding import Embedder
    from rag.evidence import Selection
    from rag.indexing import IndexReport

MAX_QUOTED = 8  # lines quoted per citation in plain-text output
INSUFFICIENT = "Insufficient evidence: the docs shown do not answer this question."


def run_index(
    docs_root: Path, index_root: Path, settings: Settings, *, rebuild: bool = False,
    show_progress: bool = True, embedder: Embedder | None = None,
) -> IndexReport:
    """`rag index`: bring the index up to date, with a progress bar while embedding."""
    from rag.embedding import make_embedder
    from rag.indexing import build_index

    embedder = embedder or make_embedder(settings.embedding)
    if not show_progress:
        return build_index(docs_root, index_root, settings, embedder, rebuild=rebuild)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("embedding {task.fields[files]} files"), BarColumn(),
               MofNCompleteColumn(), TextColumn("chunks {task.fields[rate]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("embed", total=None, rate="", files="")
        started = time.perf_counter()

        def progress(done: int, total: int, files: int) -> None:
            rate = done / max(time.perf_counter() - started, 1e-9)
            bar.update(task, completed=done, total=total, rate=f"{rate:.0f}/s", files=files)

        return build_index(docs_root, index_root, settings, embedder, rebuild=rebuild,
                           progress=progress)


def open_retriever(
    index_root: Path, settings: Settings, embedder: Embedder | None = None
) -> Retriever:
    """Load the live index version and the query embedder (no torch with the ONNX backend)."""
    from rag import store
    from rag.embedding import make_embedder

    version = store.load(index_root)
    embedder = embedder or make_embedder(settings.embedding,
                                         threads=settings.embedding.query_threads)
    return Retriever(version, embedder, settings.retrieval, settings.index)


class Pipeline:
    """Retriever, tokenizer and generator built once, for many questions (CLI, eval, server).

    Use as a context manager: a local model server it started is stopped on exit.
    """

    def __init__(self, index_root: Path, settings: Settings, *, generator: str | None = None,
                 retriever: Retriever | None = None) -> None:
        from rag.evidence import token_counter

        self.settings = settings
        self.retriever = retriever or open_retriever(index_root, settings)
        self.count = token_counter(settings.evidence.encoding)
        self.generator_name = generator or settings.generation.generator
        self._generator: object | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        close = getattr(self._generator, "close", None)
        self._generator = None
        if close is not None:
            close()

    def generator(self) -> object:
        """Built on first use, so retrieval-only work never starts a model."""
        if self._generator is None:
            from rag.generation import make_generator

            self._generator = make_generator(self.settings, self.generator_name)
        return self._generator

    def select(self, question: str, hits: Sequence[SearchHit],
               groups: frozenset[str]) -> Selection:
        from rag.evidence import evidence_budget, select_evidence

        if self.generator_name == "local":  # its own, smaller window and tokenizer
            from rag.local_model import local_evidence_budget

            budget = local_evidence_budget(self.settings, self.count(question))
        else:
            budget = evidence_budget(self.settings) - self.count(question)
        return select_evidence(hits, budget_tokens=max(budget, 0),
                               max_per_source=self.settings.evidence.max_per_source,
                               count_tokens=self.count, allowed_groups=groups)

    def ask(self, question: str, *, mode: str | None = None,
            groups: Iterable[str] = ()) -> Answer:
        """The whole pipeline; only verified, supported statements reach the Answer."""
        groups = frozenset(groups)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        hits = self.retriever.search(question, mode=mode, groups=groups)
        timings["retrieve"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        selection = self.select(question, hits, groups)
        evidence = selection.evidence
        timings["evidence"] = time.perf_counter() - t0
        name = self.generator_name
        base: dict[str, Any] = {
            "question": question, "evidence": evidence,
            "excluded": selection.excluded,
            "generator": name, "timings": timings, "hits": tuple(hits),
        }
        if not evidence or _coverage(question, evidence) < (
                self.settings.verification.min_question_coverage):
            return Answer(answer=INSUFFICIENT, statements=(), citations=(),
                          insufficient_evidence=True, **base)

        t0 = time.perf_counter()
        result = self.generator().generate(question, evidence)  # type: ignore[attr-defined]
        timings["generate"] = time.perf_counter() - t0
        tokens = {"prompt": result.prompt_tokens, "completion": result.completion_tokens}
        labels = [label for s in result.answer.statements for label in s.evidence]
        shown = {e.label for e in evidence}
        checks = {"labels_cited": len(labels),
                  "labels_verified": sum(label in shown for label in labels)}

        t0 = time.perf_counter()
        statements, fallback = _verified(result.answer, evidence, self.settings, groups,
                                         question, name)
        timings["verify"] = time.perf_counter() - t0
        supported = tuple(s for s in statements if s.supported)
        unsupported = tuple(s for s in statements if not s.supported)
        shown_unsupported = unsupported if self.settings.verification.unsupported == "mark" else ()
        common = {"unsupported": shown_unsupported, "extractive_fallback": fallback,
                  "tokens": tokens, "label_checks": checks, **base}
        if not supported:
            return Answer(answer=INSUFFICIENT, statements=(), citations=(),
                          insufficient_evidence=True, **common)
        return Answer(
            answer=" ".join(s.text for s in supported),
            statements=supported,
            citations=_unique(c for s in supported for c in s.citations),
            insufficient_evidence=False,
            **common,
        )


def _coverage(question: str, evidence: tuple[Evidence, ...]) -> float:
    """Best share of the question's content words that one evidence chunk holds."""
    from rag.verification import support_score

    return max(support_score(question, [e]) for e in evidence)


def _verified(
    model_answer: object, evidence: tuple[Evidence, ...], settings: Settings,
    groups: frozenset[str], question: str, name: str,
) -> tuple[list[Statement], bool]:
    """Check the model's statements; fall back to an extractive answer if none survive."""
    from rag.generation import ExtractiveGenerator
    from rag.verification import check_support

    threshold = settings.verification.support_threshold

    def check(answer: object) -> list[Statement]:
        if getattr(answer, "insufficient_evidence", False):
            return []
        pairs = [(s.text, s.evidence) for s in answer.statements]  # type: ignore[attr-defined]
        return check_support(pairs, evidence, threshold=threshold, allowed_groups=groups)

    try:
        statements = check(model_answer)
        failed = not any(s.supported for s in statements)
    except CitationError:
        if not settings.verification.extractive_fallback or name == "extractive":
            raise
        statements, failed = [], True
    if (not failed or name == "extractive" or not settings.verification.extractive_fallback
            or getattr(model_answer, "insufficient_evidence", False)):
        return statements, False
    fallback = ExtractiveGenerator().generate(question, evidence).answer
    extractive = check(fallback)
    if not any(s.supported for s in extractive):
        return statements, False
    return extractive, True


def _unique(citations: Iterable[Citation]) -> tuple[Citation, ...]:
    seen: dict[str, Citation] = {}
    for c in citations:
        seen.setdefault(c.label, c)
    return tuple(seen.values())


def render_answer(answer: Answer, docs_root: Path | None = None) -> str:
    """Plain text: the answer, then each citation as path:start-end (heading) with its lines
    quoted from the file (checked against the file as it is now)."""
    from rag.verification import quote_lines

    lines: list[str] = []
    if answer.extractive_fallback:
        lines.append("[extractive answer: the model's answer failed verification]")
    lines.append(answer.answer)
    for s in answer.unsupported:
        lines.append(f"[unsupported, not part of the answer] {s.text}")
    if answer.insufficient_evidence and answer.evidence:
        lines.append("\nClosest evidence:")
        lines.extend(f"  {e.chunk.source_path}:{e.chunk.start_line}-{e.chunk.end_line} "
                     f"({e.chunk.heading or '-'})" for e in answer.evidence[:3])
    if answer.citations:
        lines.append("\nCitations:")
    by_label = {e.label: e for e in answer.evidence}
    for c in answer.citations:
        lines.append(f"  [{c.label}] {c.source_path}:{c.start_line}-{c.end_line} "
                     f"({c.heading or '-'})")
        quoted: list[tuple[int, str]] = []
        note: str | None = "the docs folder is unknown"
        if docs_root is not None:
            quoted, note = quote_lines(docs_root, c.source_path, c.start_line, c.end_line,
                                       by_label[c.label].chunk.text)
        if note is not None:
            lines.append(f"        ({note})")
            continue
        lines.extend(f"    {n:>5} | {text}" for n, text in quoted[:MAX_QUOTED])
        if len(quoted) > MAX_QUOTED:
            lines.append(f"          | ... ({len(quoted) - MAX_QUOTED} more lines)")
    if any(reason == "budget" for _, reason in answer.excluded):
        lines.append("\n(some evidence was left out to fit the model's context)")
    return "\n".join(lines)
