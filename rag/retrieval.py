"""Retriever: a query becomes ranked Search Hits (dense, lexical, or both fused by RRF).

Visibility is applied inside each search (a FAISS id selector, a BM25 row mask), not after
taking the top k, so a user still gets k visible hits when they exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from rag.config import IndexSettings, RetrievalSettings
from rag.embedding import Embedder
from rag.errors import RetrievalError
from rag.records import Chunk, SearchHit
from rag.store import IndexVersion, faiss_id
from rag.stores import searches_itself

MODES = ("dense", "lexical", "hybrid")


def visible(chunk: Chunk, groups: frozenset[str]) -> bool:
    """Public chunks are visible to all; restricted ones to members of one of their groups."""
    return not chunk.visibility or not groups.isdisjoint(chunk.visibility)


@dataclass
class _Filter:
    rows: np.ndarray | None  # 0/1 mask over rows for BM25; None = everything visible
    selector: object | None  # FAISS id selector; None = everything visible
    count: int
    groups: frozenset[str] = frozenset()  # for an index that filters in its own searches


class Retriever:
    """Search over one loaded index version; settings are validated once, here."""

    def __init__(
        self,
        index: IndexVersion,
        embedder: Embedder,
        settings: RetrievalSettings,
        index_settings: IndexSettings | None = None,
    ) -> None:
        import faiss

        self.index = index
        self.embedder = embedder
        self.settings = settings
        self.index_settings = index_settings or IndexSettings()
        faiss.omp_set_num_threads(self.index_settings.faiss_threads)
        if embedder.dimension != index.manifest.dimension or embedder.name != (
            index.manifest.embedding_model
        ):
            raise RetrievalError(
                f"index {index.path.parent} was built with {index.manifest.embedding_model} "
                f"({index.manifest.dimension} dims) but the config uses {embedder.name} "
                f"({embedder.dimension} dims); rebuild with `rag index --rebuild`"
            )
        self._filters: dict[frozenset[str], _Filter] = {}

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        groups: Iterable[str] = (),
    ) -> list[SearchHit]:
        """Ranked hits for the query, only from chunks the groups may see."""
        k = self.settings.k if k is None else k
        mode = mode or self.settings.mode
        if mode not in MODES:
            raise RetrievalError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
        if not query.strip():
            raise RetrievalError("the query is empty")
        filt = self._filter(frozenset(groups))
        if filt.count == 0 or k <= 0:
            return []
        pool = max(k, self.settings.candidates)
        if mode == "dense":
            ranked = self.dense(query, k, filt)
        elif mode == "lexical":
            ranked = self.lexical(query, k, filt)
        else:
            ranked = fuse([self.dense(query, pool, filt), self.lexical(query, pool, filt)],
                          self.settings.rrf_k)[:k]
        chunks = self.index.chunks
        return [SearchHit(chunks[row], score, rank)
                for rank, (row, score) in enumerate(ranked, start=1)]

    def embed_query(self, query: str) -> np.ndarray:
        return self.embedder.embed_batch([query]).astype(np.float32)

    def dense(
        self, query: str, k: int, filt: _Filter, vector: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        import faiss

        vector = self.embed_query(query) if vector is None else vector
        k = min(k, filt.count)
        if searches_itself(self.index):
            return self.index.dense(vector[0], k, filt.groups)
        if self.index_settings.kind == "hnsw":
            params = faiss.SearchParametersHNSW(  # type: ignore[attr-defined]
                efSearch=max(self.index_settings.hnsw_ef_search, k))
            if filt.selector is not None:
                params.sel = filt.selector
        else:
            params = (faiss.SearchParameters(sel=filt.selector)  # type: ignore[call-arg]
                      if filt.selector is not None else None)
        scores, ids = self.index.vectors.search(vector, k, params=params)
        out = []
        for fid, score in zip(ids[0], scores[0]):
            row = self.index.row_of(int(fid)) if fid >= 0 else None
            if row is not None:
                out.append((row, float(score)))
        return out

    def lexical(self, query: str, k: int, filt: _Filter) -> list[tuple[int, float]]:
        if searches_itself(self.index):
            return self.index.lexical(query, min(k, filt.count), filt.groups)
        return self.index.lexical.search(query, min(k, filt.count), filt.rows)

    def _filter(self, groups: frozenset[str]) -> _Filter:
        cached = self._filters.get(groups)
        if cached is not None:
            return cached
        if searches_itself(self.index):
            self._filters[groups] = _Filter(None, None, self.index.visible_count(groups), groups)
            return self._filters[groups]
        import faiss

        chunks = self.index.chunks
        mask = np.fromiter((visible(c, groups) for c in chunks), dtype=bool, count=len(chunks))
        count = int(mask.sum())
        if count == len(chunks):
            filt = _Filter(None, None, count)
        else:
            ids = np.array([faiss_id(c.chunk_id) for c, ok in zip(chunks, mask) if ok],
                           dtype=np.int64)
            filt = _Filter(mask.astype(np.float32), faiss.IDSelectorBatch(ids), count)
        self._filters[groups] = filt
        return filt


def fuse(rankings: list[list[tuple[int, float]]], rrf_k: int) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score = sum over rankings of 1 / (rrf_k + rank)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, (row, _) in enumerate(ranking, start=1):
            scores[row] = scores.get(row, 0.0) + 1.0 / (rrf_k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
