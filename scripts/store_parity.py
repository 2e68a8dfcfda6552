"""Do the folder store (FAISS + bm25s) and the PostgreSQL store retrieve alike on an eval set?

Starts a throwaway PostgreSQL with pgvector (pgserver) unless --dsn is given, copies the
folder index's vectors into it (keyed by text hash, so nothing is embedded again), indexes
the docs into it, runs `rag eval --generator extractive` on both stores and compares the
file- and section-level retrieval metrics and the answer metrics (must_include, citation
precision, abstention). Exits 0 only when each is within --tolerance.

    python scripts/store_parity.py --index indexes/fastapi-base \
        --docs ../shared/corpora/fastapi --eval ../shared/evals/fastapi.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
METRICS = ("hit@1", "hit@3", "hit@5", "mrr", "section_hit@1", "section_hit@3", "section_hit@5",
           "section_mrr", "evidence_hit", "must_include", "citation_precision", "abstention",
           "false_abstention")


def run_eval(store_env: dict[str, str], args: argparse.Namespace, out: Path) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **store_env}
    cmd = [sys.executable, "-m", "rag.interfaces.cli.main", "eval", str(args.eval), "--docs", str(args.docs),
           "--index", str(args.index), "--generator", "extractive", "--out", str(out)]
    done = subprocess.run(cmd, env=env, cwd=REPO, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(cmd[3:])} failed: {done.stderr.strip().splitlines()[-1:]}")
    overall = json.loads(out.read_text(encoding="utf-8"))["overall"]
    return {m: float(overall[m]) for m in METRICS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True, help="folder index (FAISS) to compare")
    ap.add_argument("--docs", type=Path, required=True)
    ap.add_argument("--eval", type=Path, required=True)
    ap.add_argument("--dsn", default="", help="PostgreSQL to use [default: a throwaway one]")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--out", type=Path, default=REPO / "reports")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop PostgreSQL

    from rag.core.config import load_settings
    from rag.indexer.pg_writer import import_vectors
    from rag.stores import folder as store

    server, pgdata = None, None
    dsn = args.dsn
    if not dsn:
        import pgserver

        pgdata = Path(tempfile.mkdtemp(prefix="rag-parity-pg-"))
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
        dsn = server.get_uri()
    try:
        settings = load_settings(None, {"RAG_STORE__KIND": "postgres", "RAG_STORE__DSN": dsn})
        added = import_vectors(settings, store.load(args.index))
        print(f"copied {added} vectors from {args.index} into PostgreSQL")
        args.out.mkdir(parents=True, exist_ok=True)
        faiss = run_eval({"RAG_STORE__KIND": "faiss"}, args, args.out / "parity-faiss.json")
        pg = run_eval({"RAG_STORE__KIND": "postgres", "RAG_STORE__DSN": dsn}, args,
                      args.out / "parity-postgres.json")
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(pgdata, ignore_errors=True)  # type: ignore[arg-type]
    print(f"{'metric':<14}{'faiss':>8}{'postgres':>10}{'diff':>8}")
    worst = 0.0
    for m in METRICS:
        diff = pg[m] - faiss[m]
        worst = max(worst, abs(diff))
        print(f"{m:<14}{faiss[m]:>8.3f}{pg[m]:>10.3f}{diff:>+8.3f}")
    ok = worst <= args.tolerance
    print(f"largest difference {worst:.3f}: {'within' if ok else 'OVER'} {args.tolerance}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
