"""Memory of the per-groups filter cache: RSS after many distinct group sets.

Loads an index, restricts every second chunk to `staff` (in memory only), then builds the
visibility filter for N distinct group sets, as N users with different groups would.

    python scripts/filter_cache_memory.py --index /work/indexes/fastapi-base --sets 60000
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from rag.core.config import RetrievalSettings
from rag.retriever.retrieval import Retriever
from rag.stores import folder as store


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _NoEmbedder:
    """Filters never embed; the Retriever only checks the model's name and dimension."""

    def __init__(self, name: str, dimension: int) -> None:
        self.name, self.dimension = name, dimension


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--sets", type=int, default=60_000)
    args = parser.parse_args()
    version = store.load(args.index)
    version.chunks = [dataclasses.replace(c, visibility=("staff",)) if i % 2 else c
                      for i, c in enumerate(version.chunks)]
    embedder = _NoEmbedder(version.manifest.embedding_model, version.manifest.dimension)
    retriever = Retriever(version, embedder, RetrievalSettings())  # type: ignore[arg-type]
    print(f"{len(version.chunks)} chunks; RSS {rss_mb():.0f} MB")
    started = time.monotonic()
    for i in range(args.sets):
        retriever.filter_for(frozenset({f"team-{i}", "staff" if i % 3 else "sales"}))
    print(f"after {args.sets} distinct group sets: RSS {rss_mb():.0f} MB, "
          f"{len(retriever._filters)} filters cached, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
