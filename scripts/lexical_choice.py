"""Lexical search in PostgreSQL: BM25 from term tables, or PostgreSQL's full-text search?

Ranks the eval questions lexically (no vectors) three ways over the same chunks: the folder
store's bm25s index, the PostgreSQL store's BM25 (term tables), and PostgreSQL full-text
search (`english` configuration, the question's lexemes OR-ed, ts_rank_cd). Prints file-level
hit@1, hit@5 and MRR for each. Needs a folder index and the same docs indexed into --dsn.

    python scripts/lexical_choice.py --index indexes/fastapi-base --dsn postgresql://... \
        --eval ../shared/evals/fastapi.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
K = 50

FTS = """
SELECT c.source_path, ts_rank_cd(to_tsvector('english', coalesce(c.heading, '') || ' ' || c.text),
                                 q.query) AS score
FROM rag_chunks c,
     (SELECT to_tsquery('english', coalesce(string_agg(lexeme, ' | '), '')) AS query
      FROM unnest(to_tsvector('english', %(question)s))) AS q
WHERE c.version_id = %(v)s
  AND to_tsvector('english', coalesce(c.heading, '') || ' ' || c.text) @@ q.query
ORDER BY score DESC, c.pos LIMIT %(k)s
"""


def metrics(cases: list[dict], rank: Callable[[str], list[str]]) -> dict[str, float]:
    """File-level hit@1, hit@5 and MRR of the first expected source in each ranking."""
    hit1 = hit5 = mrr = 0.0
    scored = [c for c in cases if c.get("expected_sources")]
    for case in scored:
        paths = rank(case["question"])
        first = next((i for i, p in enumerate(paths, 1) if p in case["expected_sources"]), None)
        hit1 += first == 1
        hit5 += first is not None and first <= 5
        mrr += 1 / first if first else 0.0
    n = max(len(scored), 1)
    return {"hit@1": hit1 / n, "hit@5": hit5 / n, "mrr": mrr / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--eval", type=Path, required=True)
    args = ap.parse_args()
    from rag.core.config import load_settings
    from rag.stores import folder as store
    from rag.stores.pg_schema import connect
    from rag.stores.postgres import PostgresIndex

    cases = [json.loads(line) for line in args.eval.read_text().splitlines() if line.strip()]
    folder = store.load(args.index)
    settings = load_settings(None, {"RAG_STORE__KIND": "postgres", "RAG_STORE__DSN": args.dsn})
    database = PostgresIndex.open(args.dsn, settings)
    conn = connect(args.dsn)
    public: frozenset[str] = frozenset()

    def bm25s(question: str) -> list[str]:
        return [folder.chunks[r].source_path for r, _ in folder.lexical.search(question, K)]

    def tables(question: str) -> list[str]:
        return [database.chunks[r].source_path for r, _ in database.lexical(question, K, public)]

    def fts(question: str) -> list[str]:
        rows = conn.execute(FTS, {"question": question, "v": database.version_id, "k": K})
        return [r[0] for r in rows.fetchall()]

    print(f"{'lexical ranking':<34}{'hit@1':>7}{'hit@5':>7}{'mrr':>7}")
    for name, rank in (("bm25s (folder store)", bm25s), ("BM25 from term tables (postgres)", tables),
                       ("PostgreSQL full-text, ts_rank_cd", fts)):
        m = metrics(cases, rank)
        print(f"{name:<34}{m['hit@1']:>7.3f}{m['hit@5']:>7.3f}{m['mrr']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
