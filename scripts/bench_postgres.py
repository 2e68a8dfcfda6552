"""Query latency of the PostgreSQL store at a given size (default 100,000 chunks).

Loads a throwaway PostgreSQL (pgserver, or --dsn) with the real FastAPI chunks and vectors
of a folder index, plus synthetic chunks up to --size: vectors drawn like scripts/bench.py
does (a Gaussian fitted to the real vectors), texts cycled from the real chunks so BM25 sees
real term statistics. Then times PostgresIndex.dense (HNSW and exact) and .lexical for the
bench queries, embedded once beforehand (not timed), and HNSW recall@10 against exact.

    python scripts/bench_postgres.py --index indexes/fastapi-base --size 100000
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
K = 10


def load(dsn: str, settings, folder, size: int) -> None:
    """Every table of one current version, bulk-loaded; the HNSW graph built once after."""
    import bench
    from pgvector.psycopg import register_vector

    from rag.core.text import index_terms
    from rag.indexer.indexing import embed_text
    from rag.stores.folder import faiss_id, reconstruct
    from rag.stores.pg_schema import connect, schema_sql

    real = reconstruct(folder.vectors, [faiss_id(c.chunk_id) for c in folder.chunks])
    texts = [embed_text(c) for c in folder.chunks]
    words = [index_terms(t) for t in texts]
    params_path = Path(tempfile.mkdtemp()) / "params.npz"
    bench.fit_params(real, params_path)
    params = dict(np.load(params_path))
    conn = connect(dsn, vectors=False)
    conn.execute(schema_sql(real.shape[1], settings))
    conn.execute("DROP INDEX rag_vectors_hnsw")
    conn.commit()
    register_vector(conn)
    lengths = [max(len(words[i % len(texts)]), 1) for i in range(size)]
    manifest = folder.manifest
    manifest.files = {}
    started = time.perf_counter()
    with conn.transaction():
        vid = conn.execute(
            "INSERT INTO rag_versions (name, manifest, chunks, is_current) "
            "VALUES ('v-bench', %s::jsonb, %s, true) RETURNING id",
            (manifest.to_json(), size)).fetchone()[0]
        cur = conn.cursor()
        rng = np.random.default_rng(7)
        with cur.copy("COPY rag_vectors (content_hash, embedding) FROM STDIN "
                      "WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "vector"])
            for start in range(0, size, 10_000):
                n = min(10_000, size - start)
                block = real[start:start + n] if start < len(real) else bench.draw(params, rng, n)
                if len(block) < n:
                    block = np.vstack([block, bench.draw(params, rng, n - len(block))])
                for i, vector in enumerate(block, start):
                    copy.write_row((f"h{i}", vector))
        with cur.copy("COPY rag_chunks (version_id, pos, chunk_id, source_id, source_path, "
                      "start_line, end_line, heading, text, content_hash, length, visibility) "
                      "FROM STDIN") as copy:
            for i in range(size):
                c = folder.chunks[i % len(texts)]
                copy.write_row((vid, i, f"c{i}", c.source_id, c.source_path, c.start_line,
                                c.end_line, c.heading, c.text, f"h{i}", lengths[i], []))
        with cur.copy("COPY rag_terms (term, content_hash, tf) FROM STDIN") as copy:
            for i in range(size):
                for term, tf in Counter(words[i % len(texts)]).items():
                    copy.write_row((term, f"h{i}", tf))
    print(f"loaded {size:,} chunks in {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    conn.execute("SET maintenance_work_mem = '1GB'")
    conn.execute(schema_sql(real.shape[1], settings))  # creates the HNSW index
    conn.commit()
    print(f"built HNSW (M {settings.index.hnsw_m}, efConstruction "
          f"{settings.index.hnsw_ef_construction}) in {time.perf_counter() - started:.1f} s",
          flush=True)
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()


def reader_role(dsn: str) -> str:
    """The DSN of a new login role that may only read (row-level security applies to it)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from rag.stores.pg_schema import connect

    conn = connect(dsn, vectors=False)
    conn.execute("CREATE ROLE rag_bench_reader LOGIN NOSUPERUSER NOBYPASSRLS")
    conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO rag_bench_reader")
    conn.commit()
    conn.close()
    return make_conninfo(**{**conninfo_to_dict(dsn), "user": "rag_bench_reader",
                            "password": None})


def measure(name: str, roles: dict[str, str], fn, items, rounds: int = 3) -> list:
    """Time fn(role, item) for every role, the roles taking turns round by round (so a busy
    machine slows them alike); prints p50 / p95 per role, returns the first role's results."""
    times: dict[str, list[float]] = {who: [] for who in roles}
    first = None
    for _ in range(rounds):
        for who in roles:
            out, seconds = timed(lambda i, who=who: fn(who, i), items)
            first = first if first is not None else out
            times[who].extend(seconds)
    for who, values in times.items():
        ms = np.array(values) * 1000
        print(f"{name}{who}: p50 {np.percentile(ms, 50):.2f} / p95 {np.percentile(ms, 95):.2f} ms",
              flush=True)
    return first or []


def timed(fn, items) -> tuple[list, list[float]]:
    """fn(item) for every item, after three warm-up calls: the results and the seconds each."""
    for item in items[:3]:  # warm caches
        fn(item)
    out, times = [], []
    for item in items:
        t = time.perf_counter()
        out.append(fn(item))
        times.append(time.perf_counter() - t)
    return out, times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, default=REPO / "indexes" / "fastapi-base")
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--ef-construction", type=int, default=64,
                    help="HNSW build breadth (pgvector's least for M 32)")
    ap.add_argument("--dsn", default="", help="an empty database [default: a throwaway one]")
    ap.add_argument("--reader", action="store_true",
                    help="query as a reader role (row-level security applies), as servers do")
    args = ap.parse_args()
    if not 1_000 <= args.size <= 1_000_000:
        ap.error("--size must be 1,000..1,000,000")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop PostgreSQL
    import bench

    from rag.core.config import load_settings
    from rag.indexer.embedding import make_embedder
    from rag.stores import folder as store
    from rag.stores.postgres import PostgresIndex

    folder = store.load(args.index)
    server, pgdata, dsn = None, None, args.dsn
    if not dsn:
        import pgserver

        pgdata = Path(tempfile.mkdtemp(prefix="rag-bench-pg-"))
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
        dsn = server.get_uri()
    try:
        env = {"RAG_STORE__KIND": "postgres", "RAG_STORE__DSN": dsn, "RAG_INDEX__KIND": "hnsw",
               "RAG_INDEX__HNSW_EF_CONSTRUCTION": str(args.ef_construction)}
        hnsw = load_settings(None, env)
        load(dsn, hnsw, folder, args.size)
        roles = {"": dsn}  # who queries: the owner, and with --reader a reader role too
        if args.reader:
            roles = {" (owner)": dsn, " (reader)": reader_role(dsn)}
        vectors = make_embedder(hnsw.embedding).embed_batch(bench.QUERIES)
        rows = list(range(len(bench.QUERIES)))
        public: frozenset[str] = frozenset()
        approx = {who: PostgresIndex.open(d, load_settings(None, {**env, "RAG_STORE__DSN": d}))
                  for who, d in roles.items()}
        exact = {who: PostgresIndex.open(d, load_settings(None, {
            **env, "RAG_STORE__DSN": d, "RAG_INDEX__KIND": "flat"})) for who, d in roles.items()}
        found = measure(f"{args.size:,} chunks, dense HNSW (efSearch "
                        f"{hnsw.index.hnsw_ef_search})", roles,
                        lambda who, i: approx[who].dense(vectors[i], K, public), rows)
        truth = measure(f"{args.size:,} chunks, dense exact", roles,
                        lambda who, i: exact[who].dense(vectors[i], K, public), rows)
        recall = np.mean([len({r for r, _ in a} & {r for r, _ in b}) / K
                          for a, b in zip(found, truth)])
        print(f"HNSW recall@{K} vs exact: {recall:.3f}")
        measure(f"{args.size:,} chunks, lexical BM25 (top 50)", roles,
                lambda who, i: approx[who].lexical(bench.QUERIES[i], 50, public), rows)
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(pgdata, ignore_errors=True)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
