"""Lexical search: BM25 over the same chunks, rebuilt with every index version.

The index stores what does not depend on who asks: each word's term frequency in each row
and each row's length. BM25's statistics (how many rows hold a word, how many rows there are,
their mean length) are computed at query time over the rows the asker may see, so a public
hit's score is the same whether or not restricted chunks share its words: no score, rank or
abstention decision tells an outsider anything about restricted text. Scores are bm25s's
Lucene BM25 (k1 1.5, b 0.75) to the bit, for an asker who sees every row.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag.core.errors import IndexingError
from rag.core.records import Chunk
from rag.core.text import index_terms

# Bumped whenever rag.core.text.index_terms or what is indexed changes: an index built with other tokens
# would silently miss words, so loading it asks for `rag index` instead.
ANALYZER = "snowball-heading1"
# Bumped whenever the files saved change (1: bm25s's score matrix, which held statistics
# over every row; 2: term frequencies and row lengths only).
LAYOUT = 2
K1, B = 1.5, 0.75  # bm25s's defaults (Lucene BM25)
STATS_KEPT = 16  # masks whose row count and mean length are kept (one per group set)
EMPTY = "\x00empty"  # the one word of a row with none: bm25s counts such a row as length 1
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

    On disk (plain .npy files, memory-mapped on load, no pickle): for each word, the rows
    holding it and how often (a sparse column matrix of term frequencies), and each row's
    length in words. BM25's statistics over rows are computed per query over the rows the
    asker may see (see the module docstring).
    """

    def __init__(self, vocab: dict[str, int], tf: np.ndarray, rows: np.ndarray,
                 indptr: np.ndarray, lengths: np.ndarray) -> None:
        self.vocab = vocab
        self.size = len(lengths)
        self._tf, self._rows, self._indptr, self._lengths = tf, rows, indptr, lengths
        self._mean_length = float(np.mean(lengths)) if len(lengths) else 1.0
        self._stats: dict[int, tuple[np.ndarray, int, float]] = {}  # see _visible_rows

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
        """One row per word list (an empty one counts as one placeholder word)."""
        vocab: dict[str, int] = {}
        words, hits, counts = [], [], []
        for row, tokens_of_row in enumerate(rows):
            for word, n in Counter(tokens_of_row or [EMPTY]).items():
                words.append(vocab.setdefault(word, len(vocab)))
                hits.append(row)
                counts.append(n)
        column = np.array(words, dtype=np.int64)
        order = np.lexsort((np.array(hits, dtype=np.int64), column))  # by word, then row
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(column, minlength=len(vocab)), out=indptr[1:])
        lengths = np.array([max(len(r), 1) for r in rows], dtype=np.int32)
        return cls(vocab, np.array(counts, dtype=np.int32)[order],
                   np.array(hits, dtype=np.int32)[order], indptr, lengths)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        meta = {"size": self.size, "analyzer": ANALYZER, "layout": LAYOUT}
        (folder / "lexical.json").write_text(json.dumps(meta), encoding="utf-8")
        (folder / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False),
                                           encoding="utf-8")
        for name, array in self._arrays().items():
            np.save(folder / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"tf": self._tf, "rows": self._rows, "indptr": self._indptr,
                "lengths": self._lengths}

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
        if meta.get("analyzer") != ANALYZER or meta.get("layout") != LAYOUT:
            raise IndexingError(
                f"index {folder.parent.parent}: its word index was built by an older version; "
                "run `rag index` to bring it up to date"
            )
        if size == 0:
            return cls.build_tokens([])
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        if not isinstance(vocab, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
            raise ValueError("vocab.json is not a word -> id map")
        # Plain arrays over the mapped files: numpy's memmap subclass slows every small op.
        tf, rows, indptr, lengths = (np.asarray(np.load(folder / f"{name}.npy", mmap_mode="r"))
                                     for name in ("tf", "rows", "indptr", "lengths"))
        if any(a.ndim != 1 or not np.issubdtype(a.dtype, np.integer)
               for a in (tf, rows, indptr, lengths)):
            raise ValueError("an array has the wrong shape or type")
        if len(lengths) != size or len(indptr) != len(vocab) + 1:
            raise ValueError("the arrays do not match the row count or the words")
        if len(tf) != len(rows) or indptr[0] != 0 or indptr[-1] != len(tf):
            raise ValueError("tf, rows and indptr do not agree")
        if np.any(np.diff(indptr) < 0):
            raise ValueError("indptr is not sorted")
        if len(rows) and (rows.min() < 0 or rows.max() >= size or tf.min() < 1):
            raise ValueError("a row index or a term frequency is out of range")
        if lengths.min() < 1 or (vocab and (min(vocab.values()) < 0
                                            or max(vocab.values()) >= len(vocab))):
            raise ValueError("a row length or a word id is out of range")
        return cls(vocab, tf, rows, indptr, lengths)

    def scores(self, words: Sequence[str], allowed: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every row for these (already tokenized) query words.

        ``allowed`` (a row mask; None: every row) is who may see what: the word counts, the
        row count and the mean row length are theirs, and the other rows score 0. The
        arithmetic is bm25s's, so a caller who sees every row gets bm25s's scores exactly.
        """
        out = np.zeros(self.size, dtype=np.float32)
        visible, mean = self.size, self._mean_length
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            visible, mean = self._visible_rows(allowed)
            if visible == 0:
                return out
        # All query words' postings at once: numpy's per-call cost, not the postings, is
        # most of a query's time.
        spans = [(int(self._indptr[w]), int(self._indptr[w + 1]))
                 for w in (self.vocab.get(word) for word in words) if w is not None]
        if not spans:
            return out
        rows = np.concatenate([self._rows[a:b] for a, b in spans])
        tf = np.concatenate([self._tf[a:b] for a, b in spans]).astype(np.float64)
        word = np.repeat(np.arange(len(spans)), [b - a for a, b in spans])
        # Hidden rows are weighed 0 rather than dropped: filtering by a scattered mask
        # costs more than scoring them.
        keep = None if allowed is None else allowed[rows]
        df = np.bincount(word, weights=keep, minlength=len(spans)).astype(np.int64)
        idf = np.array([math.log(1 + (visible - n + 0.5) / (n + 0.5)) for n in df.tolist()],
                       dtype=np.float32)
        tfc = tf / (K1 * ((1 - B) + B * self._lengths[rows] / mean) + tf)
        part = (idf[word].astype(np.float64) * tfc).astype(np.float32)
        if keep is not None:
            part *= keep
        # One word's rows are distinct, and np.add.at adds in order: the float32 sums are
        # those of adding word by word.
        np.add.at(out, rows, part)
        return out

    def _visible_rows(self, allowed: np.ndarray) -> tuple[int, float]:
        """How many rows a mask allows and their mean length; kept for the last few masks
        (a retriever hands the same mask object for every query of one group set)."""
        held = self._stats.get(id(allowed))
        if held is not None and held[0] is allowed:
            return held[1], held[2]
        visible = int(allowed.sum())
        mean = float(np.mean(self._lengths[allowed])) if visible else 1.0
        if len(self._stats) >= STATS_KEPT:
            self._stats.clear()
        self._stats[id(allowed)] = (allowed, visible, mean)  # the mask is held: its id stays
        return visible, mean

    def _postings(self, word: str, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The (allowed) rows holding this word, and how often each holds it."""
        wid = self.vocab.get(word)
        if wid is None:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
        start, end = int(self._indptr[wid]), int(self._indptr[wid + 1])
        rows, tf = self._rows[start:end], self._tf[start:end]
        if allowed is None:
            return rows, tf
        keep = allowed[rows]
        return rows[keep], tf[keep]

    def document_frequency(self, word: str, allowed: np.ndarray | None = None) -> int:
        """How many (allowed) rows hold this (already tokenized) word: 0 for one they lack."""
        mask = None if allowed is None else np.asarray(allowed, dtype=bool)
        return len(self._postings(word, mask)[0])

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(row, score) of the best k rows with a positive score; `allowed` is a row mask."""
        return self.search_tokens(index_terms(query), k, allowed)

    def search_tokens(
        self, words: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """:meth:`search` for an already tokenized query."""
        if self.size == 0 or k <= 0:
            return []
        scores = self.scores(words, allowed)
        k = min(k, self.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]  # by score, then row: deterministic
        return [(int(r), float(scores[r])) for r in top if scores[r] > 0]
