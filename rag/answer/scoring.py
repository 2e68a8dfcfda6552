"""Scoring evidence sentences against a question, for extractive answers and abstention.

Evidence chunks are read into quotable sentences with their lines (rag/reader/passages.py,
rag/reader/prose.py), and every sentence is scored against the question: the embedder's cosine,
an overlap of stemmed content words (over the sentence and the window it runs on into),
the heading path, and whether it holds the kind of thing the question asks for. A question
in parts also gets a match per part. rag/answer/extractive.py chooses what to quote from these
scores.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from rag.answer.candidates import Passage
from rag.answer.kinds import defines_term, directs, directs_purpose, has_kind
from rag.answer.questions import Part, answer_kinds, defined_terms, question_parts
from rag.answer.quoting import attachment, list_marker, quote
from rag.core.records import Chunk, Evidence, SearchHit
from rag.core.text import query_terms, tokens
from rag.core.text import terms as _terms
from rag.reader.formats import quote_blocks
from rag.reader.prose import sentences
from rag.stores.lexical import bm25_idf

__all__ = ["PassageScorer", "answer_bonus", "is_release_note", "place_prior", "share", "unscored"]

if TYPE_CHECKING:
    from rag.indexer.embedding import Embedder


_VECTORS: dict[tuple[str, str], np.ndarray] = {}  # (embedder, sentence) -> vector
_VECTOR_CACHE = 50_000
# ((question, evidence, embedder), passages) of the last call: one tuple, replaced whole,
# so a thread reading it never pairs one call's key with another's passages.
_last: tuple[tuple, list] | None = None


@lru_cache(maxsize=4096)
def _read(chunk: Chunk) -> tuple[Passage, ...]:
    """A chunk's passages before any question: its sentences, what each brings, their
    words and the window each runs on to (read once per chunk, not once per question)."""
    blocks = quote_blocks(chunk)
    in_chunk: list[Passage] = []
    none = Evidence("", SearchHit(chunk, 0.0, 0))
    for sentence in sentences(blocks):
        attached = attachment(blocks, sentence)
        text, last = quote(sentence, attached)
        brings = text != sentence.text
        block = blocks[sentence.block]
        heading = " > ".join(h for h in (chunk.heading or "", block.heading) if h)
        in_chunk.append(Passage(none, 0, sentence, list_marker(block, sentence) + text,
                                (chunk.start_line + sentence.first, chunk.start_line + last),
                                _terms(text), heading, _terms(heading), block,
                                order=len(in_chunk), brings=brings))
    _link_windows(in_chunk)
    for p in in_chunk:
        rest = p.window[0] if p.window and p.window[0].sentence.continues else None
        p.said = p.sentence.text if rest is None else f"{p.sentence.text} {rest.sentence.text}"
        if rest is not None:
            p.terms = p.terms | rest.terms
    return tuple(in_chunk)


def _placed(read: Sequence[Passage], ev: Evidence, rank: int, before: int) -> list[Passage]:
    """Fresh copies of a chunk's passages for one piece of evidence, windows among them."""
    copies = [replace(p, evidence=ev, rank=rank, order=before + p.order, window=[],
                      read_on=[], parts=[], idf={})
              for p in read]
    at = {id(p): copy for p, copy in zip(read, copies)}
    for p, copy in zip(read, copies):
        copy.window = [at[id(w)] for w in p.window]
        copy.read_on = [at[id(w)] for w in p.read_on]
    return copies


def unscored(ev: Evidence) -> list[Passage]:
    """The evidence's passages as read, before any question (nothing embedded): for a
    quote that reads on into them."""
    return _placed(_read(ev.chunk), ev, 0, 0)


class PassageScorer:
    """Scores evidence sentences against a question; sentence vectors are cached by text
    (shared by every scorer in the process, so the abstention check and the answer that
    follows embed each sentence once)."""

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = embedder

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        assert self.embedder is not None
        name = self.embedder.name
        missing = list(dict.fromkeys(t for t in texts if (name, t) not in _VECTORS))
        if missing:
            if len(_VECTORS) + len(missing) > _VECTOR_CACHE:
                _VECTORS.clear()
            for text, vec in zip(missing, self.embedder.embed_batch(missing)):
                _VECTORS[(name, text)] = vec
        return np.stack([_VECTORS[(name, t)] for t in texts])

    def remember(self, text: str, vector: np.ndarray) -> None:
        """Take a vector the embedder already made for this text (the question's, from
        the search), so that scoring the evidence does not embed it again."""
        if self.embedder is not None:
            _VECTORS[(self.embedder.name, text)] = np.asarray(vector, dtype=np.float32).reshape(-1)

    def passages(self, question: str, evidence: Sequence[Evidence]) -> list[Passage]:
        """Every quotable passage of the evidence, scored, best first. The abstention check
        and the answer that follows score the same question and evidence: the second call
        gets the first one's passages (read-only to both)."""
        key = (question, tuple(evidence), self.embedder.name if self.embedder else None)
        global _last
        last = _last
        if last and last[0] == key:
            return list(last[1])
        found = self._scored(question, evidence)
        _last = (key, found)
        return list(found)

    def _scored(self, question: str, evidence: Sequence[Evidence]) -> list[Passage]:
        found: list[Passage] = []
        for rank, ev in enumerate(evidence):
            found.extend(_placed(_read(ev.chunk), ev, rank, len(found)))
        query = query_terms(question)
        if not found or not query:
            return []
        n = len(found)
        df = Counter(t for p in found for t in set(p.terms) & set(query))
        idf = {t: bm25_idf(df[t], n) for t in query}
        total = sum(idf.values()) or 1.0
        weights = {t: w / total for t, w in idf.items()}
        for p in found:
            p.idf = weights
            p.lexical = share(query, p.terms, weights)
            p.window_lexical = share(query, p.terms.union(*(w.terms for w in p.window)),
                                     weights)
            p.heading_match = share(query, p.heading_terms, weights)
        wants = answer_kinds(question)
        asked = set(tokens(question))
        defines = defined_terms(question)
        for p in found:
            lexical = (1 - WINDOW_SHARE) * p.lexical + WINDOW_SHARE * p.window_lexical
            p.kind_match = float(bool(wants) and has_kind(p, wants, asked, defines=defines))
            p.score = (W_LEXICAL * lexical + W_HEADING * p.heading_match
                       + W_KIND * p.kind_match) / (1 + RANK_PRIOR * p.rank)
        if self.embedder is not None:
            # Only the lexically likeliest sentences are embedded: a sentence sharing no
            # word and no heading with the question rarely answers it, and embedding every
            # sentence of eight chunks costs more than the whole search.
            found.sort(key=lambda p: -p.score)
            head = found[:EMBED_TOP]
            vectors = self._embed([question] + [p.said for p in head])
            for p, sim in zip(head, vectors[1:] @ vectors[0]):
                p.dense = float(sim)
                p.score += W_DENSE * p.dense / (1 + RANK_PRIOR * p.rank)
        top = max(e.hit.score for e in evidence) or 1.0
        for p in found:
            p.answer = p.score + answer_bonus(p, wants, asked, defines)
            p.place = place_prior(p.evidence, top)
        for part in question_parts(question):
            self._score_part(part, found, weights, asked)
        found.sort(key=lambda p: (-p.score, p.rank, p.lines[0]))
        return found

    def _score_part(self, part: Part, found: Sequence[Passage], idf: dict[str, float],
                    asked: set[str]) -> None:
        """How well each passage answers one part of a question: the share of the part's
        words it holds (idf-weighted, heading included), plus its cosine with the part for
        the likeliest ones, plus a bonus when it holds the kind of thing the part asks for."""
        # Any code answers "how do I" too loosely for a part: a part that asks how wants a
        # sentence that says what to do and names the code to do it with. "Will" and
        # "returns" say too little to earn a part's bonus.
        kinds = part.kinds - {"code", "effect"}
        how = "code" in part.kinds
        defines = defined_terms(part.text)
        scores = []
        for p in found:
            score = share(part.terms, p.terms | p.heading_terms, idf)
            if kinds and has_kind(p, kinds, asked, own=True, defines=defines) or how and (
                    (directs(p.sentence.text) or directs_purpose(p.sentence.text))
                    and has_kind(p, _CODE, asked, own=True)):
                score += W_PART_KIND
            scores.append(score)
        if self.embedder is not None:
            order = sorted(range(len(found)), key=lambda i: -scores[i])[:PART_EMBED_TOP]
            vectors = self._embed([part.text] + [found[i].said for i in order])
            for i, sim in zip(order, vectors[1:] @ vectors[0]):
                scores[i] += float(sim)
        for p, score in zip(found, scores):
            p.parts.append(score)


EMBED_TOP = 12  # sentences embedded per question
WINDOW_WORDS = 90  # a quote runs on from its best sentence up to this many words
READ_WORDS = 170  # a first quote reads on through its section up to this many words
WINDOW_SHARE = 0.3  # weight of the whole window's word overlap against the sentence's


def _link_windows(in_chunk: Sequence[Passage]) -> None:
    """Give each passage the sentences that follow it in its section: its window, up to
    WINDOW_WORDS (what it is scored with), and then what a first quote reads on to, up to
    READ_WORDS."""
    for i, p in enumerate(in_chunk):
        words, prev = p.words, p
        for q in in_chunk[i + 1:]:
            if q.lines[1] <= prev.lines[1] and q.sentence.block != prev.sentence.block:
                continue  # a list item the quote already brings (it ends in ':')
            # The next sentence of one paragraph may share the line the last one ended on.
            follows = q.lines[0] > prev.lines[1] or (
                q.sentence.block == prev.sentence.block and not prev.brings)
            if q.section != p.section or not follows or words + q.words > READ_WORDS \
                    or (p.entry and q.group != p.group):
                break  # an entry's quote ends with the entry, not in the next term's
            if q.text != p.text and all(q.text != w.text for w in [*p.window, *p.read_on]):
                # (a tip repeated in each tab is quoted once)
                (p.window if words + q.words <= WINDOW_WORDS and not p.read_on
                 else p.read_on).append(q)
                words += q.words
            prev = q


W_DENSE, W_LEXICAL, W_HEADING, W_KIND = 0.3, 0.35, 0.35, 0.1
PLACE_POWER = 1.0  # how strongly the retriever's score of a chunk weighs in the first quote
CHANGELOG_PRIOR = 0.8  # a changelog entry says when something changed; a page says how
_CHANGELOG = re.compile(r"(?i)^(?:change-?log|changes|release-?notes|releases|history|news)"
                        r"(?:\.\w+)?$")


# A heading that names a release: "0.110.0 (2024-02-24)", "v1.2", "[1.0.0] - 2017-06-20",
# "Version 2.1", "2024-02-24": what it holds is a release-notes entry.
_RELEASE = re.compile(r"(?i)^\W*(?:v|version\s+|release\s+)?\d+\.\d+(?:\.\d+)?\b"
                      r"|^\W*\d{4}-\d{2}-\d{2}\b")


def is_release_note(path: str, heading: str) -> bool:
    """A release-notes entry: in a changelog (CHANGELOG.md, release-notes.md...) or under a
    heading that names a release ("Release Notes > 0.110.0 (2024-02-24) > Fixes")."""
    return bool(_CHANGELOG.match(path.rsplit("/", 1)[-1])) or any(
        _RELEASE.match(part.strip()) for part in heading.split(" > "))


def place_prior(ev: Evidence, top: float) -> float:
    """How far to trust a quote's place: its chunk's retrieval score against the best
    evidence's (search ranks whole sections better than one sentence's words do), less
    for a changelog, whose entries share a feature's words without explaining it."""
    prior = max(ev.hit.score / top, 1e-6) ** PLACE_POWER if top > 0 else 1.0
    if is_release_note(ev.chunk.source_path, ev.chunk.heading or ""):
        prior *= CHANGELOG_PRIOR
    return prior


RANK_PRIOR = 0.05
W_OWN_KIND = 0.06  # the sentence (with what it introduces) holds the kind asked for
W_DIRECTIVE = 0.08  # the sentence says what to do, for a question asking how
W_DEFINITION = 0.15  # the sentence says what the thing is, for "what is X?"


def answer_bonus(p: Passage, wants: frozenset[str], asked: set[str],
                 defines: frozenset[str] = frozenset()) -> float:
    """How much more a passage reads as an answer than its match score says: it holds,
    itself rather than the sentences after it, the kind of thing the question asks for."""
    bonus = 0.0
    if wants and has_kind(p, wants, asked, own=True, defines=defines):
        bonus += W_OWN_KIND
    if "code" in wants and directs(p.sentence.text):
        bonus += W_DIRECTIVE
    if "definition" in wants and defines and defines_term(p.sentence.text, defines):
        bonus += W_DEFINITION
    return bonus / (1 + RANK_PRIOR * p.rank)


W_PART_KIND = 0.3  # a part's match gains this when it holds the kind of thing the part asks
_CODE = frozenset({"code"})
PART_EMBED_TOP = 16  # sentences embedded per part


def share(terms: Sequence[str], have: set[str], idf: dict[str, float]) -> float:
    """The idf-weighted share of ``terms`` that ``have`` holds."""
    total = sum(idf.get(t, 0.0) for t in terms)
    return sum(idf.get(t, 0.0) for t in terms if t in have) / total if total else 0.0
