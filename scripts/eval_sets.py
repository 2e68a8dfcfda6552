"""Every eval set the repository can reach, for one generator, in one table.

Runs `rag eval` on the dev set (FastAPI), `corpus/eval.jsonl`, Hugo, Flask, the notebooks
and the sets in `evals/` (indexes built in `indexes/<name>` if missing, then reused), writes
each report to `reports/sets/<generator or --label>/<set>.json` and prints one line per set
plus the mean over sets.
The blind sets are not here: `bash ../shared/evals/blind/run.sh GENERATOR` prints theirs.

    python scripts/eval_sets.py extractive
    python scripts/eval_sets.py passage --sets fastapi,hugo
    python scripts/eval_sets.py --compare extractive passage   # per-set differences
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
LOCAL = ("httpx", "jekyll", "mdbook", "pnpm", "poetry", "prettier", "pydantic", "uv", "vite")
SETS: dict[str, tuple[Path, Path]] = {
    "fastapi": (SHARED / "evals" / "fastapi.jsonl", SHARED / "corpora" / "fastapi"),
    "corpus": (REPO / "corpus" / "eval.jsonl", REPO / "corpus"),
    "hugo": (REPO / "evals" / "hugo.jsonl", SHARED / "corpora" / "hugo"),
    "flask": (REPO / "evals" / "flask.jsonl", SHARED / "corpora" / "flask"),
    "notebooks": (REPO / "evals" / "notebooks.jsonl", SHARED / "corpora" / "notebooks"),
    **{name: (REPO / "evals" / f"{name}.jsonl", REPO / "evals" / "corpora" / name)
       for name in LOCAL},
}
COLUMNS = ("section_hit@3", "must_include", "reader_ceiling", "citation_precision",
           "abstention", "false_abstention")


def report_path(generator: str, name: str) -> Path:
    return REPO / "reports" / "sets" / generator / f"{name}.json"


def run(generator: str, names: list[str], label: str) -> None:
    rag = REPO / ".venv" / "bin" / "rag"
    for name in names:
        cases, docs = SETS[name]
        out = report_path(label, name)
        out.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [str(rag), "eval", str(cases), "--docs", str(docs), "--index",
             str(REPO / "indexes" / name), "--generator", generator, "--out", str(out)],
            cwd=REPO, capture_output=True, text=True, check=False,
            env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if not out.is_file():
            print(f"{name}: rag eval failed: {done.stderr.strip().splitlines()[-1:]}",
                  file=sys.stderr)


def overall(generator: str, name: str) -> dict | None:
    path = report_path(generator, name)
    return json.loads(path.read_text())["overall"] if path.is_file() else None


def table(generator: str, names: list[str]) -> None:
    print(f"{'set':<10} {'cases':>5} " + " ".join(f"{c[:12]:>12}" for c in COLUMNS)
          + "  words med/max")
    sums: dict[str, list[float]] = {c: [] for c in COLUMNS}
    for name in names:
        o = overall(generator, name)
        if o is None:
            continue
        values = [o.get(c) for c in COLUMNS]
        for c, v in zip(COLUMNS, values, strict=True):
            if v is not None:
                sums[c].append(v)
        w = o.get("answer_words") or {}
        print(f"{name:<10} {o['cases']:>5} " + " ".join(
            f"{v:>12.3f}" if v is not None else f"{'-':>12}" for v in values)
            + f"  {w.get('median')}/{w.get('max')}")
    print(f"{'mean':<10} {'':>5} " + " ".join(
        f"{sum(v) / len(v):>12.3f}" if v else f"{'-':>12}" for v in sums.values()))


def compare(a: str, b: str, names: list[str]) -> None:
    """Per-set change from a to b, and the mean change over sets."""
    print(f"{b} - {a}")
    print(f"{'set':<10} " + " ".join(f"{c[:12]:>12}" for c in COLUMNS))
    deltas: dict[str, list[float]] = {c: [] for c in COLUMNS}
    for name in names:
        x, y = overall(a, name), overall(b, name)
        if x is None or y is None:
            continue
        row = []
        for c in COLUMNS:
            if x.get(c) is None or y.get(c) is None:
                row.append(f"{'-':>12}")
                continue
            deltas[c].append(y[c] - x[c])
            row.append(f"{y[c] - x[c]:>+12.3f}")
        print(f"{name:<10} " + " ".join(row))
    print(f"{'mean':<10} " + " ".join(
        f"{sum(v) / len(v):>+12.3f}" if v else f"{'-':>12}" for v in deltas.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("generator", nargs="?", default="extractive")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"))
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--label", help="report folder name (default: the generator's)")
    args = parser.parse_args()
    names = [n for n in args.sets.split(",") if n]
    if args.compare:
        compare(*args.compare, names)
        return
    label = args.label or args.generator
    if not args.table_only:
        run(args.generator, names, label)
    table(label, names)


if __name__ == "__main__":
    main()
