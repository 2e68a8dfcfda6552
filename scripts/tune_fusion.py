"""Measure hybrid fusion weights, BM25 heading weight and section merging on an eval set.

Dense and BM25 rankings are computed once per question; every setting is then fused and
merged into places by the retriever's own code, so the figures are what `rag eval` sees.
Prints the curve of each knob around the chosen setting and a k-fold cross-validation
(choose the best setting on k-1 folds, score it on the held-out fold), so a weight that
only fits these questions shows up as a gap between the two.

    python scripts/tune_fusion.py ../shared/evals/fastapi.jsonl \\
        --docs ../shared/corpora/fastapi --index indexes/fastapi

The index must be up to date with the docs (`rag index DOCS --index DIR` first). Re-run
after changing the chunker or the lexical analyzer: the best weights move with them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rag.core.config import RetrievalSettings, load_settings
from rag.core.records import SearchHit
from rag.core.text import index_terms
from rag.eval.evaluation import EvalCase, load_cases, section_rank
from rag.indexer.embedding import make_embedder
from rag.retriever.retrieval import Retriever, fuse_weighted
from rag.stores import folder as store
from rag.stores.lexical import HEADING_WEIGHT, LexicalIndex

METRICS = ("hit@1", "hit@3", "hit@5", "mrr", "s_hit@1", "s_hit@3", "s_hit@5", "s_mrr")


@dataclass(frozen=True)
class Setting:
    heading_weight: int
    fusion: str
    dense_weight: float
    rrf_k: int
    section_chunks: int
    bonus: float = 0.0

    def label(self) -> str:
        rrf = f" rrf_k={self.rrf_k}" if self.fusion == "rrf" else ""
        return (f"hw={self.heading_weight} {self.fusion} w_dense={self.dense_weight:.2f}{rrf} "
                f"section_chunks={self.section_chunks} bonus={self.bonus}")


def case_metrics(hits: Sequence[SearchHit], case: EvalCase) -> dict[str, float]:
    expected = set(case.expected_sources)
    first = next((h.rank for h in hits if h.chunk.source_path in expected), None)
    section = section_rank(hits, case)
    out = {}
    for k in (1, 3, 5):
        out[f"hit@{k}"] = float(first is not None and first <= k)
        out[f"s_hit@{k}"] = float(section is not None and section <= k)
    out["mrr"] = 1.0 / first if first else 0.0
    out["s_mrr"] = 1.0 / section if section else 0.0
    out["lines"] = statistics.fmean(h.chunk.end_line - h.chunk.start_line + 1 for h in hits[:5])
    out["words"] = statistics.fmean(len(h.chunk.text.split()) for h in hits[:5])
    return out


def objective(scores: dict[str, float]) -> float:
    """What a setting is chosen by: the section metrics the project tracks."""
    return scores["s_hit@3"] + scores["s_mrr"]


def mean(per_case: list[dict[str, float]], ids: Sequence[int]) -> dict[str, float]:
    return {m: statistics.fmean(per_case[i][m] for i in ids) for m in per_case[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("eval_file", type=Path)
    parser.add_argument("--docs", type=Path, required=True)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--k", type=int, default=8, help="hits per question (retrieval.k)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write every setting's scores here")
    args = parser.parse_args()

    settings = load_settings()
    cases = [c for c in load_cases(args.eval_file) if c.answerable]
    version = store.load(args.index)
    if Path(version.manifest.docs_root) != args.docs.resolve():
        sys.exit(f"{args.index} indexes {version.manifest.docs_root}, not {args.docs}")
    embedder = make_embedder(settings.embedding)
    retriever = Retriever(version, embedder, settings.retrieval, settings.index)
    pool = settings.retrieval.candidates
    weights = (1, 2, 3)
    lexicals = {hw: LexicalIndex.from_chunks(version.chunks, hw) for hw in weights}

    runs = []  # per case: dense ranking, lexical ranking per heading weight, filter
    for case in cases:
        filt = retriever.filter_for(frozenset(case.groups))
        dense = retriever.dense(case.question, pool, filt)
        words = index_terms(case.question)
        lex = {hw: index.search_tokens(words, min(pool, filt.count), filt.rows)
               for hw, index in lexicals.items()}
        runs.append((dense, lex, filt))

    grid = [Setting(hw, "rrf", w, rrf_k, n)
            for hw, w, rrf_k, n in itertools.product(
                weights, [i / 10 for i in range(2, 9)], (10, 30, 60), (1, 2, 3, 4))]
    grid += [Setting(hw, "convex", w, 0, n)
             for hw, w, n in itertools.product(weights, [i / 10 for i in range(1, 10)],
                                               (1, 2, 3, 4))]
    grid += [Setting(hw, f, w, 60 if f == "rrf" else 0, n, b)
             for hw, f, w, n, b in itertools.product(
                 weights, ("rrf", "convex"), [i / 10 for i in range(3, 8)], (2, 3, 4, 6),
                 (0.25, 0.5, 1.0))]
    grid += [Setting(hw, mode, 1.0 if mode == "dense" else 0.0, 60, n)
             for hw, mode, n in itertools.product(weights, ("dense", "lexical"), (1, 3))]
    conf = settings.retrieval
    current = Setting(HEADING_WEIGHT, conf.fusion, conf.dense_weight,
                      conf.rrf_k if conf.fusion == "rrf" else 0, conf.section_chunks,
                      conf.section_bonus)
    if current not in grid:
        grid.append(current)
    per_setting: dict[Setting, list[dict[str, float]]] = {}
    for setting in grid:
        rs = RetrievalSettings(fusion="convex" if setting.fusion == "convex" else "rrf",
                               dense_weight=setting.dense_weight,
                               rrf_k=setting.rrf_k if setting.fusion != "convex" else 60)
        scores = []
        for case, (dense, lex, filt) in zip(cases, runs):
            if setting.fusion == "dense":
                ranked = dense
            elif setting.fusion == "lexical":
                ranked = lex[setting.heading_weight]
            else:
                ranked = fuse_weighted(dense, lex[setting.heading_weight], rs)
            hits = retriever.places(ranked, args.k, filt, setting.section_chunks, setting.bonus)
            scores.append(case_metrics(hits, case))
        per_setting[setting] = scores

    everything = list(range(len(cases)))
    overall = {s: mean(v, everything) for s, v in per_setting.items()}
    best = max(overall, key=lambda s: objective(overall[s]))
    header = " ".join(f"{m:>7}" for m in METRICS) + "  lines  words"

    def row(setting: Setting) -> str:
        s = overall[setting]
        return (" ".join(f"{s[m]:7.3f}" for m in METRICS)
                + f" {s['lines']:6.1f} {s['words']:6.0f}  {setting.label()}")

    print(f"{len(cases)} answerable cases, k={args.k}, {pool} candidates per retriever")
    print("\nBaselines (each retriever alone; plain RRF):")
    print(header)
    for setting in grid:
        if setting.fusion in ("dense", "lexical") and setting.heading_weight == best.heading_weight:
            print(row(setting))
    print(row(Setting(best.heading_weight, "rrf", 0.5, 60, 1)))
    print(f"\nBest on all cases: {best.label()}  (current config: {current.label()})")
    knobs = ("heading_weight", "fusion", "dense_weight", "rrf_k", "section_chunks", "bonus")
    for name in ("dense_weight", "rrf_k", "section_chunks", "heading_weight", "bonus"):
        print(f"\nCurve over {name}, other knobs as the best setting:")
        print(header)
        for setting in grid:
            if all(getattr(setting, f) == getattr(best, f) for f in knobs if f != name):
                print(row(setting))

    # k-fold cross-validation: pick on k-1 folds, score on the held-out one.
    order = everything[:]
    random.Random(0).shuffle(order)
    folds = [order[i::args.folds] for i in range(args.folds)]
    held_out: list[dict[str, float]] = []
    print(f"\n{args.folds}-fold cross-validation (objective: section hit@3 + section MRR):")
    for i, test in enumerate(folds):
        train = [j for f in folds[:i] + folds[i + 1:] for j in f]
        chosen = max(grid, key=lambda s: objective(mean(per_setting[s], train)))
        scores = mean(per_setting[chosen], test)
        held_out.append({m: scores[m] * len(test) for m in scores})
        print(f"  fold {i + 1}: chose {chosen.label()}; held-out s_hit@3 "
              f"{scores['s_hit@3']:.3f} s_mrr {scores['s_mrr']:.3f}")
    cv = {m: sum(h[m] for h in held_out) / len(cases) for m in METRICS}
    print("  cross-validated: " + " ".join(f"{m} {cv[m]:.3f}" for m in METRICS))
    print("  best on all cases: " + " ".join(f"{m} {overall[best][m]:.3f}" for m in METRICS))
    print("  current config: " + " ".join(f"{m} {overall[current][m]:.3f}" for m in METRICS))
    if args.json:
        args.json.write_text(json.dumps(
            [{"setting": s.label(), **v} for s, v in overall.items()], indent=1))


if __name__ == "__main__":
    main()
