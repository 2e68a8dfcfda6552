"""Which chunks each eval question retrieves, per search mode, and how long a search takes.

Run it before and after a change to ranking code, over the same index, and compare the
two outputs: a change meant to keep ranking as it was must give the same chunk ids.

    python scripts/hits_snapshot.py --index indexes/fastapi \
        --eval ../shared/evals/fastapi.jsonl --out before.jsonl
    python scripts/hits_snapshot.py ... --out after.jsonl --compare before.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("lexical", "hybrid", "dense")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--eval", type=Path, required=True, help="JSONL with a 'question' field")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path, help="an earlier --out to compare with")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5, help="timed passes over the questions")
    ap.add_argument("--groups", default="", help="comma-separated groups of the asker")
    args = ap.parse_args()

    from rag.core.config import load_settings
    from rag.pipeline import open_retriever

    settings = load_settings(REPO / "configs" / "default.toml")
    retriever = open_retriever(args.index, settings)
    groups = frozenset(g for g in args.groups.split(",") if g)
    cases = [json.loads(line) for line in args.eval.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    rows, times = [], {mode: [] for mode in MODES}
    for mode in MODES:
        for case in cases:
            retriever.search(case["question"], k=args.k, mode=mode, groups=groups)  # warm
        for _ in range(args.repeat):
            for case in cases:
                started = time.perf_counter()
                hits = retriever.search(case["question"], k=args.k, mode=mode, groups=groups)
                times[mode].append(time.perf_counter() - started)
        for case in cases:
            hits = retriever.search(case["question"], k=args.k, mode=mode, groups=groups)
            rows.append({"id": case.get("id", case["question"]), "mode": mode,
                         "chunks": [h.chunk.chunk_id for h in hits],
                         "scores": [round(h.score, 6) for h in hits]})
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for mode in MODES:
        print(f"{mode}: search p50 {1000 * statistics.median(times[mode]):.2f} ms over "
              f"{len(times[mode])} searches")
    if args.compare:
        before = {(r["id"], r["mode"]): r for r in map(json.loads, args.compare.read_text(
            encoding="utf-8").splitlines())}
        for mode in MODES:
            mine = [r for r in rows if r["mode"] == mode]
            ids = sum(before[(r["id"], mode)]["chunks"] != r["chunks"] for r in mine)
            scores = sum(before[(r["id"], mode)]["scores"] != r["scores"] for r in mine)
            print(f"{mode}: {ids} of {len(mine)} questions changed their top-{args.k} chunk "
                  f"ids, {scores} their scores")


if __name__ == "__main__":
    main()
