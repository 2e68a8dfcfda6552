"""Fit the abstention model on eval sets and write it where `rag ask` reads it.

For each case the pipeline retrieves and selects evidence as `rag ask` does, and records the
abstention signals (rag/answer/abstention.py); the label is whether the case is answerable. A small
L2-regularised logistic regression (numpy, class-balanced) is scored with repeated
stratified k-fold cross-validation; inside every training part the decision threshold is
itself chosen by an inner cross-validation, so the printed figures are out-of-sample.
Each set is scored alone (a model fitted on that set only) and then all together, with the
pooled model's figures also split by set: the pooled model is the one written. Last, each
set is scored by a model fitted on the other sets only: how it fares on docs it never saw.
The final model is fitted on all cases and written as JSON (default rag/abstention.json).

The signals of every case are kept in the repository (evals/abstention_signals.jsonl), so
the fit is reproducible from the repository alone; collecting them again needs the sets'
docs folders (FastAPI and Hugo are in ../shared/corpora). Refit after any change to
chunking, retrieval or the extractive scorer:

    python scripts/fit_abstention.py                # fit from evals/abstention_signals.jsonl
    python scripts/fit_abstention.py --collect      # first collect the twelve sets' signals again
    python scripts/fit_abstention.py --set EVAL DOCS INDEX [--set ...]   # other sets, collected
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rag.answer.abstention import BUNDLED_MODEL, FEATURES
from rag.indexer.embedding import DEFAULT_MODEL_NAME

# Every set the repository reaches (see evals/README.md), twelve docs folders of different
# size and style, so the model does not learn one corpus's score scale: the FastAPI dev set,
# the project's own eval, Hugo, and the nine sets over evals/corpora. The blind sets are not
# among them: they stay the check on docs the model never saw.
LOCAL_SETS = ("httpx", "jekyll", "mdbook", "pnpm", "poetry", "prettier", "pydantic", "uv", "vite")
DEFAULT_SETS = [["../shared/evals/fastapi.jsonl", "../shared/corpora/fastapi", "indexes/fastapi"],
                ["corpus/eval.jsonl", "corpus", "indexes/corpus"],
                ["evals/hugo.jsonl", "../shared/corpora/hugo", "indexes/hugo"],
                *([f"evals/{name}.jsonl", f"evals/corpora/{name}", f"indexes/{name}"]
                  for name in LOCAL_SETS)]
SIGNALS = REPO / "evals" / "abstention_signals.jsonl"
MAX_FALSE_ABSTENTION = 0.05  # the threshold keeps at most this share of answerable cases out


def case_evidence(eval_file: Path, docs: Path, index: Path, settings) -> Iterator[tuple]:
    """(case, pipeline, evidence) for each case of an eval set, the evidence selected as
    `rag ask` selects it; the index is built (or brought up to date) first."""
    from rag.eval.evaluation import load_cases
    from rag.indexer.embedding import make_embedder
    from rag.indexer.indexing import run_index
    from rag.pipeline import Pipeline, open_retriever

    embedder = make_embedder(settings.embedding)
    run_index(docs, index, settings, show_progress=False, embedder=embedder)
    retriever = open_retriever(index, settings, embedder)
    with Pipeline(index, settings, generator="extractive", retriever=retriever) as pipeline:
        for case in load_cases(eval_file):
            groups = frozenset(case.groups)
            hits = pipeline.retriever.search(case.question, groups=groups)
            yield case, pipeline, pipeline.select(case.question, hits, groups).evidence


def collect(eval_file: Path, docs: Path, index: Path, settings) -> list[dict]:
    """One record per case of an eval set: its id, label (answerable) and every signal."""
    records = []
    for case, pipeline, evidence in case_evidence(eval_file, docs, index, settings):
        values = pipeline.abstention_signals(case.question, evidence, frozenset(case.groups))
        records.append({"set": eval_file.name, "id": case.id, "answerable": case.answerable,
                        "signals": {name: float(values[name]) for name in FEATURES}})
    return records


def read_signals(path: Path) -> list[dict]:
    """The records `--collect` wrote, in order."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def by_set(records: list[dict], use: list[int]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(set name, signals: cases x chosen features, labels: 1 = answerable) per set."""
    out: dict[str, tuple[list, list]] = {}
    for r in records:
        rows, labels = out.setdefault(r["set"], ([], []))
        rows.append([r["signals"][FEATURES[i]] for i in use])
        labels.append(float(r["answerable"]))
    return [(name, np.array(rows, dtype=float), np.array(labels))
            for name, (rows, labels) in out.items()]


def final_model(x: np.ndarray, y: np.ndarray, l2: float, k: int, seed: int) -> tuple:
    """The written model: fitted on every case, its threshold chosen out of fold."""
    model = fit(x, y, l2)
    return model, pick_threshold(out_of_fold(x, y, k, l2, np.random.default_rng(seed)), y)


def fit(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                            float]:
    """Class-balanced logistic regression on standardised features (Newton steps)."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    weight = np.where(y == 1, len(y) / (2 * max(y.sum(), 1)), len(y) / (2 * max((1 - y).sum(), 1)))
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0  # the bias is not shrunk
    for _ in range(50):
        p = 1 / (1 + np.exp(-np.clip(z @ w, -50, 50)))
        grad = z.T @ (weight * (p - y)) + penalty * w
        hess = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, scale, w[:-1], float(w[-1])


def predict(model: tuple, x: np.ndarray) -> np.ndarray:
    mean, scale, weights, bias = model
    return 1 / (1 + np.exp(-np.clip(((x - mean) / scale) @ weights + bias, -50, 50)))


def folds(y: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Stratified folds: each holds its share of answerable and unanswerable cases."""
    out: list[list[int]] = [[] for _ in range(k)]
    for label in (0.0, 1.0):
        idx = rng.permutation(np.flatnonzero(y == label))
        for i, j in enumerate(idx):
            out[i % k].append(int(j))
    return [np.array(sorted(f)) for f in out]


def out_of_fold(x: np.ndarray, y: np.ndarray, k: int, l2: float,
                rng: np.random.Generator) -> np.ndarray:
    probs = np.zeros(len(y))
    for test in folds(y, k, rng):
        train = np.setdiff1d(np.arange(len(y)), test)
        probs[test] = predict(fit(x[train], y[train], l2), x[test])
    return probs


def pick_threshold(probs: np.ndarray, y: np.ndarray) -> float:
    """Catch the most unanswerable cases while abstaining on at most MAX_FALSE_ABSTENTION
    of the answerable ones; ties go to the threshold in the middle of the gap."""
    candidates = np.unique(np.concatenate([probs, [0.0, 1.0]]))
    scored = []
    for lo, hi in itertools.pairwise(candidates):
        t = (lo + hi) / 2
        false_abst = float(np.mean(probs[y == 1] < t)) if (y == 1).any() else 0.0
        abst = float(np.mean(probs[y == 0] < t)) if (y == 0).any() else 1.0
        scored.append(((abst if false_abst <= MAX_FALSE_ABSTENTION else -1.0, -false_abst), t))
    best_key = max(key for key, _ in scored)
    tied = [t for key, t in scored if key == best_key]
    return float(np.median(tied))


def cross_validate(x: np.ndarray, y: np.ndarray, k: int, repeats: int, l2: float,
                   seed: int, sets: np.ndarray | None = None) -> dict[str, float]:
    """Repeated stratified k-fold; the threshold is chosen inside each training part.
    With ``sets`` (a name per case) the figures are also given per set, as
    "abstention NAME" and "false_abstention NAME"."""
    rng = np.random.default_rng(seed)
    sets = np.array([""] * len(y)) if sets is None else sets
    abstained: list[tuple[str, float, bool]] = []  # (set, label, abstained) per test case
    for _ in range(repeats):
        for test in folds(y, k, rng):
            train = np.setdiff1d(np.arange(len(y)), test)
            threshold = pick_threshold(out_of_fold(x[train], y[train], k, l2, rng), y[train])
            p = predict(fit(x[train], y[train], l2), x[test])
            abstained.extend(zip(sets[test], y[test], p < threshold))
    out: dict[str, float] = {}
    for name in ["", *sorted(set(sets) - {""})]:
        rows = [(label, a) for s, label, a in abstained if not name or s == name]
        for key, label in (("abstention", 0), ("false_abstention", 1)):
            hits = [a for lab, a in rows if lab == label]
            if hits:  # a set without unanswerable cases has no abstention figure
                out[key + (f" {name}" if name else "")] = round(float(np.mean(hits)), 4)
    return out


def held_out(x: np.ndarray, y: np.ndarray, sets: np.ndarray, k: int, l2: float,
             seed: int) -> dict[str, float]:
    """Each set scored by a model fitted on the others only (threshold by their own
    cross-validation): how the model fares on docs it has never seen, as
    "held_out abstention NAME" and "held_out false_abstention NAME"."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(sets):
        train, test = sets != name, sets == name
        if len(set(y[train])) < 2:
            continue  # the other sets hold no unanswerable (or no answerable) case
        threshold = pick_threshold(out_of_fold(x[train], y[train], k, l2,
                                               np.random.default_rng(seed)), y[train])
        abstained = predict(fit(x[train], y[train], l2), x[test]) < threshold
        for key, label in (("abstention", 0), ("false_abstention", 1)):
            if (y[test] == label).any():
                out[f"held_out {key} {name}"] = round(float(abstained[y[test] == label].mean()), 4)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", nargs=3, action="append", metavar=("EVAL", "DOCS", "INDEX"),
                        help="an eval file, its docs folder and index (repeatable) "
                             "[default: the twelve sets of DEFAULT_SETS]")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--l2", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features", default=",".join(FEATURES),
                        help="comma-separated signals to use [default: all]")
    parser.add_argument("--out", type=Path, default=BUNDLED_MODEL)
    parser.add_argument("--collect", action="store_true",
                        help=f"collect the default sets' signals again into {SIGNALS.name}")
    args = parser.parse_args()
    use = [FEATURES.index(name) for name in args.features.split(",")]

    from rag.core.config import load_settings

    settings = load_settings(args.config)
    settings.verification.abstention = "off"
    embedding_model = settings.embedding.model or DEFAULT_MODEL_NAME
    if settings.embedding.backend == "onnx-int8":
        embedding_model += "+int8"
    if args.set or args.collect:
        records = [r for eval_file, docs, index in args.set or DEFAULT_SETS
                   for r in collect(Path(eval_file), Path(docs), Path(index), settings)]
        if not args.set:
            SIGNALS.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
            print(f"wrote the signals of {len(records)} cases to {SIGNALS.relative_to(REPO)}")
    else:
        records = read_signals(SIGNALS)
    xs, ys, names = [], [], []
    for eval_file, x, y in by_set(records, use):
        head = f"{eval_file}: {len(y)} cases ({int((1 - y).sum())} unanswerable)"
        if min(int((1 - y).sum()), int(y.sum())) < args.folds:
            print(f"{head}; too few of one kind to fit alone")  # its folds would be empty
        else:
            cv = cross_validate(x, y, args.folds, args.repeats, args.l2, args.seed)
            print(f"{head}; fitted alone, {args.folds}-fold CV x{args.repeats}: abstention "
                  f"{cv['abstention']:.3f}, false abstention {cv['false_abstention']:.3f}")
        xs.append(x)
        ys.append(y)
        names.append(f"{Path(eval_file).name} ({len(y)} cases)")
    x, y = np.vstack(xs), np.concatenate(ys)
    sets = np.concatenate([[name.split(" (")[0]] * len(part) for name, part in zip(names, ys)])
    cv = cross_validate(x, y, args.folds, args.repeats, args.l2, args.seed, sets)
    cv |= held_out(x, y, sets, args.folds, args.l2, args.seed)
    model, threshold = final_model(x, y, args.l2, args.folds, args.seed)
    mean, scale, weights, bias = model
    payload = {
        "features": [FEATURES[i] for i in use], "mean": [round(float(v), 6) for v in mean],
        "scale": [round(float(v), 6) for v in scale],
        "weights": [round(float(v), 6) for v in weights], "bias": round(bias, 6),
        "threshold": round(threshold, 6), "embedding_model": embedding_model,
        "fitted_on": names, "cv": cv,
    }
    args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"all sets: {len(y)} cases; {args.folds}-fold CV x{args.repeats}: abstention "
          f"{cv['abstention']:.3f}, false abstention {cv['false_abstention']:.3f}")
    for name in dict.fromkeys(sets):
        figures = [f"{key.replace('_', ' ')} {cv[f'{key} {name}']:.3f}"
                   for key in ("abstention", "false_abstention") if f"{key} {name}" in cv]
        print(f"  of which {name}: {', '.join(figures)}")
    for name in dict.fromkeys(sets):
        figures = [f"{key.replace('_', ' ')} {cv[f'held_out {key} {name}']:.3f}"
                   for key in ("abstention", "false_abstention")
                   if f"held_out {key} {name}" in cv]
        if figures:
            print(f"{name} held out (fitted on the other sets only): {', '.join(figures)}")
    print("weights: " + ", ".join(f"{FEATURES[i]} {w:+.2f}" for i, w in zip(use, weights)))
    print(f"threshold {threshold:.3f}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
