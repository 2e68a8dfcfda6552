"""Lexical search: BM25 (bm25s) over the same chunks, rebuilt with every index version."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "do", "does", "for", "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "should", "so", "than", "that", "the", "their", "then", "there", "these", "this", "to", "was", "were", "what", "when", "where", "which", "while", "who", "why", "will", "with", "would", "you", "your"]
)
_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    """A light suffix stripper: enough to match 'parameters' with 'parameter'."""
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("s", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 2 and not word.endswith("ss"):
            return word[: -len(suffix)] + keep
    return word


def tokenize(text: str) -> list[str]:
    """Lowercased words (identifiers split on _ and -), stopwords dropped, lightly stemmed."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


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
    def build(cls, texts: Sequence[str]) -> LexicalIndex:
        tokens = [tokenize(t) or ["\x00empty"] for t in texts]
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
        (folder / "lexical.json").write_text(json.dumps({"size": self.size}), encoding="utf-8")
        if self._retriever is not None:
            self._retriever.save(str(folder))  # type: ignore[attr-defined]

    @classmethod
    def load(cls, folder: Path) -> LexicalIndex:
        """Read a saved index, checking shapes and bounds: damage is an IndexingError."""
        from rag.errors import IndexingError

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
        if size == 0:
            return cls.build([])
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

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(row, score) of the best k rows with a positive score; `allowed` is a 0/1 row mask."""
        if self.size == 0 or k <= 0:
            return []
        scores = self.scores(tokenize(query))
        if allowed is not None:
            scores *= allowed
        k = min(k, self.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]  # by score, then row: deterministic
        return [(int(r), float(scores[r])) for r in top if scores[r] > 0]
