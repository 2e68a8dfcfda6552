"""Retriever: a query becomes ranked Search Hits (dense, lexical, or both fused).

Visibility is applied inside each search (a FAISS id selector, a BM25 row mask), not after
taking the top k, so a user still gets k visible hits when they exist.

A hit is a place, not a fragment. After fusion, adjacent chunks of one section (same file,
same heading path, next to each other in the file) that both ranked merge into one hit,
at most ``retrieval.section_chunks`` chunks long, so the top k holds k different places.
The merged hit's lines are the file's own lines for the merged range (chunk texts plus the
blank lines the chunker trimmed between them), read from the docs folder and checked
against every merged chunk's indexed text; if the file no longer holds that text the
chunks stay separate hits. Its ``chunk_id`` is the best-scoring merged chunk's (a real
chunk of the index, inside the range) and ``chunk_ids`` lists every merged chunk.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

import numpy as np

from rag.core.config import IndexSettings, RetrievalSettings
from rag.core.errors import RetrievalError
from rag.core.records import Chunk, SearchHit
from rag.indexer.embedding import Embedder
from rag.reader.docfiles import read_source
from rag.stores import searches_itself
from rag.stores.folder import IndexVersion, faiss_id

MODES = ("dense", "lexical", "hybrid")
FILTER_CACHE = 128  # group sets whose filters are kept: each holds a mask and an id list


def visible(chunk: Chunk, groups: frozenset[str]) -> bool:
    """Public chunks are visible to all; restricted ones to members of one of their groups."""
    return not chunk.visibility or not groups.isdisjoint(chunk.visibility)


@dataclass
class _Filter:
    rows: np.ndarray | None  # bool mask over rows for BM25; None = everything visible
    selector: object | None  # FAISS id selector; None = everything visible
    count: int
    groups: frozenset[str] = frozenset()  # the user's groups, whom every merged chunk must suit


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
        self._filters: OrderedDict[frozenset[str], _Filter] = OrderedDict()  # LRU
        self._filters_lock = threading.Lock()
        self._last_query: tuple[str, np.ndarray] | None = None
        root = index.manifest.docs_root
        self._docs_root = Path(root).resolve() if root else None

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
        filt = self.filter_for(frozenset(groups))
        if filt.count == 0 or k <= 0:
            return []
        pool = max(k, self.settings.candidates)
        if mode == "dense":
            ranked = self.dense(query, pool, filt)
        elif mode == "lexical":
            ranked = self.lexical(query, pool, filt)
        else:
            ranked = fuse_weighted(self.dense(query, pool, filt),
                                   self.lexical(query, pool, filt), self.settings)
        return self.places(ranked, k, filt)

    def places(self, ranked: list[tuple[int, float]], k: int, filt: _Filter,
               section_chunks: int | None = None, bonus: float | None = None) -> list[SearchHit]:
        """The first k places of a ranked row list: adjacent chunks of a section merged.

        With a bonus every row is walked (a merged chunk raises its place's score) and the
        places are re-ranked; without one the walk stops at the k-th place.
        """
        limit = self.settings.section_chunks if section_chunks is None else section_chunks
        bonus = self.settings.section_bonus if bonus is None else bonus
        chunks = self.index.chunks
        if searches_itself(self.index) and limit > 1:  # it holds only the rows searches return
            self.index.fetch(_gaps([row for row, _ in ranked], chunks, limit), filt.groups)
        spans: list[_Span] = []
        by_section: dict[tuple[str, str | None], list[_Span]] = {}
        files: dict[str, list[str] | None] = {}  # file lines, read once per search
        for row, score in ranked:
            key = (chunks[row].source_path, chunks[row].heading)
            taker = next((span for span in by_section.get(key, ())
                          if span.take(row, limit, chunks, filt, files, self._docs_root)), None)
            if taker is not None:
                taker.score += bonus * score
                continue
            if len(spans) == k and not bonus:
                break  # without a bonus, later rows cannot change the first k places
            span = _Span(row, row, row, score)
            spans.append(span)
            by_section.setdefault(key, []).append(span)
        if bonus:
            spans = sorted(spans, key=lambda s: (-s.score, s.best))[:k]
        return [span.hit(chunks, rank, files) for rank, span in enumerate(spans, start=1)]

    def read_on(self, hit: SearchHit, groups: Iterable[str] = ()) -> SearchHit | None:
        """The hit one chunk longer: joined, as a merged hit, with the chunk that follows
        it in its section, so that a quote ending where the hit ends can read on. None
        where the section ends with the hit, that chunk is hidden from these groups, or the
        file no longer holds them."""
        if hit.chunk.start_col is not None:
            return None
        ids = hit.chunk_ids or (hit.chunk.chunk_id,)
        first, last = (self.index.row_of(faiss_id(i)) for i in (ids[0], ids[-1]))
        best = self.index.row_of(faiss_id(hit.chunk.chunk_id))
        if first is None or last is None or best is None:
            return None
        if searches_itself(self.index):  # no search may have returned that chunk
            self.index.fetch([last + 1], frozenset(groups))
        span = _Span(first, last, best, hit.score)
        files: dict[str, list[str] | None] = {}
        if not span.take(last + 1, last - first + 2, self.index.chunks,
                         self.filter_for(frozenset(groups)), files, self._docs_root):
            return None
        return span.hit(self.index.chunks, hit.rank, files)

    def embed_query(self, query: str) -> np.ndarray:
        """The query's vector; the last one is kept, since one question is searched several
        times (the hybrid search, then the abstention check's dense search)."""
        last = self._last_query  # one tuple read: safe while other threads replace it
        if last is not None and last[0] == query:
            return last[1]
        vector = self.embedder.embed_batch([query]).astype(np.float32)
        self._last_query = (query, vector)
        return vector

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

    def document_frequencies(
        self, words: Sequence[str], groups: frozenset[str]
    ) -> tuple[dict[str, int], int]:
        """How many chunks these groups may see hold each (tokenized) BM25 word, and how many
        they may see: word statistics for abstention that say nothing of chunks hidden from
        them."""
        if searches_itself(self.index):
            return self.index.document_frequencies(words, groups)
        filt = self.filter_for(groups)
        lexical = self.index.lexical
        return {w: lexical.document_frequency(w, filt.rows) for w in words}, filt.count

    def filter_for(self, groups: frozenset[str]) -> _Filter:
        """Which rows these groups may see (cached for the most recently used group sets)."""
        with self._filters_lock:
            cached = self._filters.get(groups)
            if cached is not None:
                self._filters.move_to_end(groups)
                return cached
            if searches_itself(self.index):
                filt = _Filter(None, None, self.index.visible_count(groups), groups)
                self._filters[groups] = filt
                while len(self._filters) > FILTER_CACHE:
                    self._filters.popitem(last=False)
                return filt
        import faiss

        chunks = self.index.chunks
        mask = np.fromiter((visible(c, groups) for c in chunks), dtype=bool, count=len(chunks))
        count = int(mask.sum())
        if count == len(chunks):
            filt = _Filter(None, None, count, groups)
        else:
            ids = np.array([faiss_id(c.chunk_id) for c, ok in zip(chunks, mask) if ok],
                           dtype=np.int64)
            filt = _Filter(mask, faiss.IDSelectorBatch(ids), count, groups)
        with self._filters_lock:
            self._filters[groups] = filt
            while len(self._filters) > FILTER_CACHE:
                self._filters.popitem(last=False)
        return filt


def fuse_weighted(
    dense: list[tuple[int, float]], lexical: list[tuple[int, float]],
    settings: RetrievalSettings,
) -> list[tuple[int, float]]:
    """Dense and lexical rankings fused as the settings say (see RetrievalSettings)."""
    w = settings.dense_weight
    if settings.fusion == "convex":
        return fuse_scores([dense, lexical], [w, 1.0 - w])
    # Doubled so that equal weights give plain RRF's scores.
    return fuse([dense, lexical], settings.rrf_k, [2 * w, 2 * (1.0 - w)])


def fuse(rankings: list[list[tuple[int, float]]], rrf_k: int,
         weights: list[float] | None = None) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion: score = sum of weight / (rrf_k + rank)."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights):
        for rank, (row, _) in enumerate(ranking, start=1):
            scores[row] = scores.get(row, 0.0) + weight / (rrf_k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def fuse_scores(rankings: list[list[tuple[int, float]]],
                weights: list[float]) -> list[tuple[int, float]]:
    """Convex combination of scores min-max normalised per ranking (absent: 0)."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights):
        if not ranking:
            continue
        values = [score for _, score in ranking]
        low, high = min(values), max(values)
        for row, score in ranking:
            norm = (score - low) / (high - low) if high > low else 1.0
            scores[row] = scores.get(row, 0.0) + weight * norm
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


@dataclass
class _Span:
    """Rows first..last of one section; `best` ranked highest and names the hit."""

    first: int
    last: int
    best: int
    score: float

    def take(self, row: int, limit: int, chunks: list[Chunk], filt: _Filter,
             files: dict[str, list[str] | None], root: Path | None) -> bool:
        """Absorb a lower-ranked row of the same section if the span stays within `limit`
        chunks; chunks between the two (same section, visible) are taken in too."""
        if self.first <= row <= self.last:
            return True
        first, last = min(self.first, row), max(self.last, row)
        if last - first + 1 > limit:
            return False
        best = chunks[self.best]
        key = (best.source_path, best.heading)
        try:  # an index that searches itself knows only the rows its searches returned
            run = [chunks[r] for r in range(first, last + 1)]
        except IndexError:
            return False
        for r, chunk in zip(range(first, last + 1), run, strict=True):
            if (chunk.source_path, chunk.heading) != key:
                return False
            if (filt.rows is not None and not filt.rows[r]) or not visible(chunk, filt.groups):
                return False  # never merge a chunk this user may not see
        if root is None or not _file_holds(run, files, root):
            return False
        self.first, self.last = first, last
        return True

    def hit(self, chunks: list[Chunk], rank: int,
            files: dict[str, list[str] | None]) -> SearchHit:
        best = chunks[self.best]
        if self.first == self.last:
            return SearchHit(best, self.score, rank)
        merged = [chunks[r] for r in range(self.first, self.last + 1)]
        start, end = merged[0].start_line, merged[-1].end_line
        lines = files[best.source_path] or []
        chunk = replace(best, text="\n".join(lines[start - 1:end]),
                        start_line=start, end_line=end, start_col=None, end_col=None)
        return SearchHit(chunk, self.score, rank, tuple(c.chunk_id for c in merged))


def _gaps(rows: list[int], chunks: Sequence[Chunk], limit: int) -> set[int]:
    """The rows between ranked rows of one section close enough to merge (within ``limit``
    chunks): what merging them takes in."""
    by_section: dict[tuple[str, str | None], set[int]] = {}
    for row in rows:
        by_section.setdefault((chunks[row].source_path, chunks[row].heading), set()).add(row)
    gaps: set[int] = set()
    for found in by_section.values():
        ordered = sorted(found)
        for a, b in pairwise(ordered):
            if b - a + 1 <= limit:
                gaps.update(range(a + 1, b))
    return gaps


def _file_holds(run: list[Chunk], files: dict[str, list[str] | None], root: Path) -> bool:
    """True when the file still holds each chunk's text at its lines, with only blank lines
    between them: then the file's lines over the whole run are the merged hit's text."""
    path = run[0].source_path
    if path not in files:
        files[path] = _read_lines(root, path)
    lines = files[path]
    if lines is None:
        return False
    previous_end = run[0].start_line - 1
    for chunk in run:
        if chunk.start_line <= previous_end or chunk.end_line > len(lines):
            return False
        if any(line.strip() for line in lines[previous_end:chunk.start_line - 1]):
            return False
        if "\n".join(lines[chunk.start_line - 1:chunk.end_line]) != chunk.text:
            return False
        previous_end = chunk.end_line
    return True


def _read_lines(root: Path, rel: str) -> list[str] | None:
    """The file's lines numbered as the chunker numbers them; None if it cannot be read
    through the docs gate (rag.reader.docfiles: a regular file at that path, under the size cap)."""
    try:
        info = (root / rel).lstat()
    except (OSError, ValueError):
        return None
    return _lines_of(str(root), rel, info.st_mtime_ns, info.st_size)


@lru_cache(maxsize=64)  # keyed by mtime and size, so an edited file is read again
def _lines_of(root: str, rel: str, mtime_ns: int, size: int) -> list[str] | None:
    found = read_source(Path(root), rel)
    return None if found is None else found[0].replace("\r\n", "\n").split("\n")
