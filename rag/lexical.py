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
    """BM25 over chunk texts; rows match the index's chunk order."""

    def __init__(self, retriever: object | None, size: int) -> None:
        self._retriever = retriever
        self.size = size

    @classmethod
    def build(cls, texts: Sequence[str]) -> LexicalIndex:
        import bm25s

        tokens = [tokenize(t) or ["\x00empty"] for t in texts]
        if not tokens:
            return cls(None, 0)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return cls(retriever, len(tokens))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "lexical.json").write_text(json.dumps({"size": self.size}), encoding="utf-8")
        if self._retriever is not None:
            self._retriever.save(str(folder))  # type: ignore[attr-defined]

    @classmethod
    def load(cls, folder: Path) -> LexicalIndex:
        import bm25s

        size = json.loads((folder / "lexical.json").read_text(encoding="utf-8"))["size"]
        if size == 0:
            return cls(None, 0)
        return cls(bm25s.BM25.load(str(folder)), size)

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(row, score) of the best k rows with a positive score; `allowed` is a 0/1 row mask."""
        words = [w for w in tokenize(query) if w in self._vocab()]
        if self._retriever is None or not words or k <= 0:
            return []
        k = min(k, self.size)
        rows, scores = self._retriever.retrieve(  # type: ignore[attr-defined]
            [words], k=k, show_progress=False, weight_mask=allowed, n_threads=1
        )
        return [(int(r), float(s)) for r, s in zip(rows[0], scores[0]) if s > 0]

    def _vocab(self) -> dict[str, int]:
        return self._retriever.vocab_dict if self._retriever is not None else {}  # type: ignore
