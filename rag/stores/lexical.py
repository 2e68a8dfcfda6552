"""Lexical search: BM25 (bm25s) over the same chunks, rebuilt with every index version."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag.core.errors import IndexingError
from rag.core.records import Chunk
from rag.core.text import index_terms

# Bumped whenever rag.core.text.index_terms or what is indexed changes: an index built with other tokens
# would silently miss words, so loading it asks for `rag index` instead.
ANALYZER = "snowball-heading1"
# How many times a chunk's heading path (a front matter title included) is indexed before
# its text. scripts/tune_fusion.py measured 1, 2 and 3 within one case of each other on the
# FastAPI dev set and 1 best by two cases on corpus/eval.jsonl, so 1 it is; re-measure when
# the heading path changes (e.g. titles joining it).
HEADING_WEIGHT = 1


def bm25_idf(document_frequency: int, size: int) -> float:
    """BM25's inverse document frequency of a word that ``document_frequency`` of ``size``
    rows hold (Lucene's, as bm25s weighs words)."""
    return math.log(1 + (size - document_frequency + 0.5) / (document_frequency + 0.5))


def chunk_tokens(chunk: Chunk, heading_weight: int = HEADING_WEIGHT) -> list[str]:
    """What BM25 indexes for one chunk: its heading path, weighted, then its text (for a
    format other than Markdown, its text as a reader sees it: no tags, no JSON)."""
    from rag.reader.formats import search_text

    heading = index_terms(chunk.heading) if chunk.heading else []
    shown = search_text(chunk)
    return heading * heading_weight + index_terms(chunk.text if shown is None else shown)


class LexicalIndex:
    """BM25 over chunk texts; rows match the index's chunk order.

    bm25s builds and saves the index (per-word, per-row BM25 scores as a sparse CSC matrix
    in plain .npy files). Queries read those arrays with numpy directly, so a query process
    never imports bm25s and scipy (about 0.3 s of a cold `rag search`).
    """

    def __init__(self, size: int, vocab: dict[str, int], data: np.ndarray,
                 indices: np.ndarray, indptr: np.ndarray, retriever: object | None = None) -> None:
        self.size = size
        self.vocab = vocab
        self._data, self._indices, self._indptr = data, indices, indptr
        self._retriever = retriever  # only set after build(), for save()

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk],
                    heading_weight: int = HEADING_WEIGHT) -> LexicalIndex:
        """BM25 over the chunks' headings (weighted) and texts, one row per chunk."""
        return cls.build_tokens([chunk_tokens(c, heading_weight) for c in chunks])

    @classmethod
    def build(cls, texts: Sequence[str]) -> LexicalIndex:
        """BM25 over plain texts, one row per text."""
        return cls.build_tokens([index_terms(t) for t in texts])

    @classmethod
    def build_tokens(cls, rows: Sequence[list[str]]) -> LexicalIndex:
        tokens = [row or ["\x00empty"] for row in rows]
        empty = np.zeros(0, dtype=np.float32)
        if not tokens:
            return cls(0, {}, empty, empty.astype(np.int32), np.zeros(1, dtype=np.int32))
        import bm25s

        retriever = bm25s.BM25()  # Lucene BM25, k1 1.5, b 0.75
        retriever.index(tokens, show_progress=False)
        scores = retriever.scores
        return cls(len(tokens), dict(retriever.vocab_dict), scores["data"], scores["indices"],
                   scores["indptr"], retriever)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        meta = {"size": self.size, "analyzer": ANALYZER}
        (folder / "lexical.json").write_text(json.dumps(meta), encoding="utf-8")
        if self._retriever is not None:
            self._retriever.save(str(folder))  # type: ignore[attr-defined]

    @classmethod
    def load(cls, folder: Path) -> LexicalIndex:
        """Read a saved index, checking shapes and bounds: damage is an IndexingError."""
        try:
            return cls._load(folder)
        except FileNotFoundError as exc:
            name = Path(exc.filename or "?").name
            why = f"{name} is missing"
        except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise IndexingError(f"lexical index {folder} is damaged ({why}); "
                            "rebuild with `rag index --rebuild`")

    @classmethod
    def _load(cls, folder: Path) -> LexicalIndex:
        meta = json.loads((folder / "lexical.json").read_text(encoding="utf-8"))
        size = meta.get("size") if isinstance(meta, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError("lexical.json has no row count")
        if meta.get("analyzer") != ANALYZER:
            raise IndexingError(
                f"index {folder.parent.parent}: its word index was built by an older version; "
                "run `rag index` to bring it up to date"
            )
        if size == 0:
            return cls.build_tokens([])
        vocab = json.loads((folder / "vocab.index.json").read_text(encoding="utf-8"))
        if not isinstance(vocab, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
            raise ValueError("vocab.index.json is not a word -> id map")
        data, indices, indptr = (np.load(folder / f"{name}.csc.index.npy", mmap_mode="r")
                                 for name in ("data", "indices", "indptr"))
        if data.ndim != 1 or indices.ndim != 1 or indptr.ndim != 1 or len(indptr) == 0:
            raise ValueError("an array has the wrong shape")
        if not (np.issubdtype(data.dtype, np.floating) and np.issubdtype(indices.dtype, np.integer)
                and np.issubdtype(indptr.dtype, np.integer)):
            raise ValueError("an array has the wrong type")
        if len(data) != len(indices) or indptr[0] != 0 or indptr[-1] != len(data):
            raise ValueError("data, indices and indptr do not agree")
        if len(indptr) > 1 and np.any(np.diff(indptr) < 0):
            raise ValueError("indptr is not sorted")
        if len(indices) and (indices.min() < 0 or indices.max() >= size):
            raise ValueError("a row index is out of range")
        if vocab and (min(vocab.values()) < 0 or max(vocab.values()) >= len(indptr)):
            raise ValueError("a word id is out of range")
        # bm25s gives its "" placeholder the last id, which has no column: never look it up.
        vocab = {w: i for w, i in vocab.items() if i < len(indptr) - 1}
        return cls(size, vocab, data, indices, indptr)

    def scores(self, words: Sequence[str]) -> np.ndarray:
        """BM25 score of every row for these (already tokenized) query words."""
        out = np.zeros(self.size, dtype=np.float32)
        for word in words:
            wid = self.vocab.get(word)
            if wid is None:
                continue
            start, end = int(self._indptr[wid]), int(self._indptr[wid + 1])
            out[self._indices[start:end]] += self._data[start:end]
        return out

    def document_frequency(self, word: str) -> int:
        """How many rows hold this (already tokenized) word: 0 for a word the corpus lacks."""
        wid = self.vocab.get(word)
        return 0 if wid is None else int(self._indptr[wid + 1] - self._indptr[wid])

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(row, score) of the best k rows with a positive score; `allowed` is a 0/1 row mask."""
        return self.search_tokens(index_terms(query), k, allowed)

    def search_tokens(
        self, words: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """:meth:`search` for an already tokenized query."""
        if self.size == 0 or k <= 0:
            return []
        scores = self.scores(words)
        if allowed is not None:
            scores *= allowed
        k = min(k, self.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]  # by score, then row: deterministic
        return [(int(r), float(scores[r])) for r in top if scores[r] > 0]
