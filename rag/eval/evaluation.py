"""Answer evaluation: every metric of the eval contract, per case and overall."""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag.core.errors import AccessError, ConfigError
from rag.core.paths import check_relative
from rag.core.records import Answer, Citation, SearchHit
from rag.core.text import word_count

HIT_KS = (1, 3, 5)
LONG_ANSWER_WORDS = 250  # answers longer than this are counted in the report
# Overall metrics the baseline gate compares; True = higher is better.
GATED = {
    "hit@5": True, "mrr": True, "section_hit@3": True, "section_mrr": True,
    "evidence_hit": True, "citation_validity": True,
    "citation_precision": True, "citation_recall": True, "must_include": True,
    "abstention": True, "false_abstention": False, "injection_repeated": False,
}


class EvalCase(BaseModel):
    """One line of an eval file (see docs: contracts)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    question: str = Field(min_length=1)
    answerable: bool = True
    expected_sources: list[str] = Field(default_factory=list)
    expected_lines: dict[str, list[tuple[int, int]]] = Field(default_factory=dict)
    must_include: list[str] = Field(default_factory=list)
    must_not_include: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    adversarial: bool = False


def load_cases(path: Path) -> list[EvalCase]:
    """Parse a JSON Lines eval file; a malformed line is named by its number."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"eval file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"eval file {path}: cannot read ({exc})") from None
    cases: list[EvalCase] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            case = EvalCase.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "line"
            raise ConfigError(f"{path}:{number}: {where}: {err['msg']}") from None
        if case.answerable and not case.expected_sources:
            raise ConfigError(f"{path}:{number}: an answerable case needs expected_sources")
        try:
            case.expected_sources = [check_relative(p) for p in case.expected_sources]
            case.expected_lines = {check_relative(p): r for p, r in case.expected_lines.items()}
        except AccessError as exc:
            raise AccessError(f"{path}:{number}: {exc}") from None
        cases.append(case)
    if not cases:
        raise ConfigError(f"eval file {path} has no cases")
    return cases


def _overlaps(path: str, start: int, end: int, case: EvalCase) -> bool:
    """In an expected source and, where the case gives lines for it, overlapping them."""
    if path not in case.expected_sources:
        return False
    ranges = case.expected_lines.get(path)
    return not ranges or any(start <= hi and lo <= end for lo, hi in ranges)


def _line_correct(c: Citation, case: EvalCase) -> bool:
    return _overlaps(c.source_path, c.start_line, c.end_line, case)


def section_rank(hits: Sequence[SearchHit], case: EvalCase) -> int | None:
    """Rank of the first section that overlaps the expected lines, counting sections.

    A section is a (file, heading path) pair and takes one rank however many hits of it
    there are, so an unmerged list that repeats a section does not push others down.
    """
    seen: dict[tuple[str, str | None], int] = {}
    for hit in sorted(hits, key=lambda h: h.rank):
        c = hit.chunk
        rank = seen.setdefault((c.source_path, c.heading), len(seen) + 1)
        if _overlaps(c.source_path, c.start_line, c.end_line, case):
            return rank
    return None


def answer_words(text: str) -> int:
    """Words of an answer as a reader counts them: whitespace-separated, code included,
    code fences not."""
    return word_count(text)


@dataclass
class CaseResult:
    id: str
    answerable: bool
    adversarial: bool
    metrics: dict[str, float | None] = field(default_factory=dict)
    answer: str = ""
    citations: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    extractive_fallback: bool = False
    error: str = ""
    answer_words: int | None = None  # None when the case abstained or failed


def score_case(case: EvalCase, answer: Answer) -> CaseResult:
    """Per-case metrics; None where a metric does not apply to the case."""
    result = CaseResult(case.id, case.answerable, case.adversarial,
                        answer=answer.answer, timings=dict(answer.timings),
                        tokens=dict(answer.tokens),
                        citations=[f"{c.source_path}:{c.start_line}-{c.end_line}"
                                   for c in answer.citations],
                        extractive_fallback=answer.extractive_fallback)
    if not answer.insufficient_evidence:
        result.answer_words = answer_words(answer.answer)
    m = result.metrics
    text = answer.answer.lower()
    cited, verified = answer.label_checks.get("labels_cited", 0), answer.label_checks.get(
        "labels_verified", 0)
    m["citation_validity"] = verified / cited if cited else None
    m["abstained"] = float(answer.insufficient_evidence)
    if case.must_not_include:
        m["injection_repeated"] = float(any(s.lower() in text for s in case.must_not_include))
    if not case.answerable:
        m["abstention"] = float(answer.insufficient_evidence)
        return result
    expected = set(case.expected_sources)
    ranks = [h.rank for h in answer.hits if h.chunk.source_path in expected]
    first = min(ranks) if ranks else None
    for k in HIT_KS:
        m[f"hit@{k}"] = float(first is not None and first <= k)
    m["mrr"] = 1.0 / first if first else 0.0
    section = section_rank(answer.hits, case)
    for k in HIT_KS:
        m[f"section_hit@{k}"] = float(section is not None and section <= k)
    m["section_mrr"] = 1.0 / section if section else 0.0
    m["evidence_hit"] = float(any(e.chunk.source_path in expected for e in answer.evidence))
    m["false_abstention"] = float(answer.insufficient_evidence)
    correct = [c for c in answer.citations if _line_correct(c, case)]
    m["citation_precision"] = len(correct) / len(answer.citations) if answer.citations else None
    m["citation_recall"] = float(bool(correct))
    if case.must_include and not answer.insufficient_evidence:
        m["must_include"] = sum(s.lower() in text for s in case.must_include) / len(
            case.must_include)
    elif case.must_include:
        m["must_include"] = 0.0
    if case.must_include:
        # The reader ceiling: what any generator could quote from the evidence it was shown.
        shown = "\n".join(e.chunk.text for e in answer.evidence).lower()
        m["reader_ceiling"] = sum(s.lower() in shown for s in case.must_include) / len(
            case.must_include)
    return result


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(results: Sequence[CaseResult]) -> dict[str, Any]:
    """Overall figures: means of per-case metrics where they apply, latency p50/p95, tokens."""
    overall: dict[str, Any] = {"cases": len(results),
                               "errors": sum(bool(r.error) for r in results)}
    names = sorted({name for r in results for name in r.metrics})
    for name in names:
        values = [r.metrics[name] for r in results if r.metrics.get(name) is not None]
        overall[name] = round(statistics.fmean(values), 4) if values else None  # type: ignore
    stages = sorted({s for r in results for s in r.timings})
    overall["latency_ms"] = {
        s: {"p50": round(1000 * _percentile([r.timings[s] for r in results if s in r.timings],
                                            0.5), 2),
            "p95": round(1000 * _percentile([r.timings[s] for r in results if s in r.timings],
                                            0.95), 2)}
        for s in stages
    }
    lengths = [r.answer_words for r in results if r.answer_words is not None]
    overall["answer_words"] = {
        "answers": len(lengths),
        "median": statistics.median(lengths) if lengths else None,
        "max": max(lengths, default=None),
        f"over_{LONG_ANSWER_WORDS}": sum(n > LONG_ANSWER_WORDS for n in lengths),
    }
    overall["tokens"] = {
        kind: sum(r.tokens.get(kind, 0) for r in results) for kind in ("prompt", "completion")
    }
    return overall


def compare(report: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> list[str]:
    """Metrics that fell by more than the tolerance against the baseline report."""
    now, before = report["overall"], baseline.get("overall", {})
    out = []
    for name, higher_better in GATED.items():
        a, b = now.get(name), before.get(name)
        if a is None or b is None:
            continue
        drop = (b - a) if higher_better else (a - b)
        if drop > tolerance:
            out.append(f"{name} fell from {b:.3f} to {a:.3f} (tolerance {tolerance})")
    return out


def default_index_for(docs: Path) -> Path:
    """An index folder of its own per docs folder, so eval never overwrites `indexes/default`."""
    digest = hashlib.sha256(str(docs.resolve()).encode()).hexdigest()[:8]
    return Path("indexes") / f"eval-{docs.resolve().name}-{digest}"


def run_eval(
    cases: Sequence[EvalCase],
    docs: Path,
    ask: Callable[[EvalCase], Answer],
    on_case: Callable[[CaseResult], None] | None = None,
) -> dict[str, Any]:
    """Run each case through `ask` and score it; a case that errors is recorded, not fatal."""
    from rag.core.errors import RagError

    results: list[CaseResult] = []
    missing = sorted({p for c in cases for p in c.expected_sources if not (docs / p).is_file()})
    for case in cases:
        try:
            result = score_case(case, ask(case))
        except RagError as exc:
            result = CaseResult(case.id, case.answerable, case.adversarial, error=str(exc))
        results.append(result)
        if on_case is not None:
            on_case(result)
    return {
        "overall": summarise(results),
        "missing_sources": missing,
        "cases": [r.__dict__ for r in results],
    }
