"""How well could the scorer's own signals choose an extractive answer's first quote?

For every answerable case of the eval sets, the pipeline retrieves and scores passages as
`rag ask` does; each passage the first quote is chosen from (rag.answer.extractive.first_candidates)
is labelled by whether its quote overlaps the case's expected lines. The script prints how
often the shipped rule (rag.answer.extractive.first_score) picks a right one, and how often a
listwise logistic model over the same signals does, fitted on the other sets only
(leave-one-set-out), so that a better weighting of these signals would show as a gain. The
share of cases with any right candidate bounds both.

    python scripts/first_quote_ceiling.py        # the twelve sets; indexes built if missing
    python scripts/first_quote_ceiling.py --set EVAL DOCS INDEX [--set ...]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from fit_abstention import DEFAULT_SETS, case_evidence

SETS = DEFAULT_SETS
SIGNALS = ["log_answer", "log_place", "dense", "lexical", "window_lexical", "heading",
           "kind", "answer_bonus", "changelog", "words", "evidence_rank",
           "page_chunks", "page_share", "sentences_before"]


def signals(p, passages, evidence) -> list[float]:
    from rag.answer.scoring import is_release_note

    path = p.evidence.chunk.source_path
    total = sum(e.hit.score for e in evidence) or 1.0
    return [math.log(max(p.answer, 1e-3)), math.log(max(p.place, 1e-3)), p.dense, p.lexical,
            p.window_lexical, p.heading_match, p.kind_match, p.answer - p.score,
            float(is_release_note(path, p.heading)), min(p.words, 150) / 100, p.rank / 8,
            sum(e.chunk.source_path == path for e in evidence) / 4,
            sum(e.hit.score for e in evidence if e.chunk.source_path == path) / total,
            min(sum(q.evidence is p.evidence and q.section == p.section
                    and q.lines[0] < p.lines[0] for q in passages), 10) / 10]


def collect(eval_file: Path, docs: Path, index: Path, settings) -> list[tuple]:
    """Per answerable case: (signals, labels, the rule's scores) of its first candidates."""
    from rag.answer.extractive import first_candidates, first_score, run_on_lines

    cases = []
    for case, pipeline, evidence in case_evidence(eval_file, docs, index, settings):
        if not case.answerable:
            continue
        passages = pipeline.scorer().passages(case.question, evidence)
        first = first_candidates(passages)
        if not first:
            continue
        expected = case.expected_lines or {}
        labels = []
        for p in first:
            start, end = run_on_lines(p)
            labels.append(float(any(start <= b and a <= end
                                    for a, b in expected.get(p.evidence.chunk.source_path, []))))
        cases.append((np.array([signals(p, passages, evidence) for p in first]),
                      np.array(labels), np.array([first_score(p) for p in first])))
    return cases


def fit(cases: list[tuple], l2: float, steps: int = 300, rate: float = 0.5) -> np.ndarray:
    """Listwise logistic regression: softmax over a case's candidates, right ones as target."""
    w = np.zeros(len(SIGNALS))
    w[:2] = 1.0  # start from the rule: log(answer) + log(place)
    trained = [(x, y / y.sum()) for x, y, _ in cases if y.sum() > 0]
    for _ in range(steps):
        grad = l2 * w
        for x, target in trained:
            s = x @ w
            p = np.exp(s - s.max())
            grad += x.T @ (p / p.sum() - target) / len(trained)
        w -= rate * grad
    return w


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", nargs=3, action="append", metavar=("EVAL", "DOCS", "INDEX"),
                        help="an eval file, its docs folder and index (repeatable) "
                             "[default: the eight sets]")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--l2", type=float, default=0.05)
    args = parser.parse_args()

    from rag.core.config import load_settings

    settings = load_settings(args.config)
    settings.verification.abstention = "off"
    found = {Path(e).stem: collect(Path(e), Path(d), Path(i), settings)
             for e, d, i in args.set or SETS}
    rows = []
    for name, cases in found.items():
        w = fit([c for other, rest in found.items() if other != name for c in rest], args.l2)
        rule = np.mean([y[np.argmax(score)] for _, y, score in cases])
        fitted = np.mean([y[np.argmax(x @ w)] for x, y, _ in cases])
        bound = np.mean([y.max() for _, y, _ in cases])
        rows.append((len(cases), rule, fitted, bound))
        print(f"{name}: {len(cases)} cases; first quote right: rule {rule:.3f}, "
              f"fitted on the other sets {fitted:.3f}; a right candidate exists {bound:.3f}")
    n = sum(r[0] for r in rows)
    print(f"all: {n} cases; rule {sum(r[0] * r[1] for r in rows) / n:.3f}, "
          f"fitted (held out) {sum(r[0] * r[2] for r in rows) / n:.3f}, "
          f"bound {sum(r[0] * r[3] for r in rows) / n:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
