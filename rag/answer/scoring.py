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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from rag.answer.questions import Part, answer_kinds, defined_terms, question_parts
from rag.answer.quoting import attachment, quote
from rag.core.records import Chunk, Evidence, SearchHit
from rag.core.text import query_terms, tokens, word_count
from rag.core.text import terms as _terms
from rag.reader.formats import quote_blocks
from rag.reader.passages import BULLET, FACT, NAME_HEADING, Block, is_labelled_fact
from rag.reader.prose import Sentence, sentences
from rag.stores.lexical import bm25_idf

__all__ = ["Passage", "PassageScorer", "answer_bonus", "defines_term", "has_kind", "is_release_note",
           "place_prior", "share"]

if TYPE_CHECKING:
    from rag.indexer.embedding import Embedder


@dataclass
class Passage:
    """A candidate quote: a sentence plus what it introduces, with its scores."""

    evidence: Evidence
    rank: int  # 0-based position of its evidence
    sentence: Sentence
    text: str  # the quote as the answer shows it
    lines: tuple[int, int]  # file lines, inclusive
    terms: set[str]
    heading: str
    heading_terms: set[str]
    block: Block  # the block of the chunk it is read from (its section, entry, facts)
    dense: float = 0.0
    lexical: float = 0.0
    heading_match: float = 0.0
    window_lexical: float = 0.0
    kind_match: float = 0.0  # the quote holds the kind of thing the question asks for
    score: float = 0.0
    answer: float = 0.0  # score plus how much the quote itself reads as an answer (choose)
    place: float = 1.0  # how much the retriever trusts its chunk, against the best (choose)
    window: list[Passage] = field(default_factory=list)  # what a quote of it runs on to
    read_on: list[Passage] = field(default_factory=list)  # and, as a first quote, then to
    idf: dict[str, float] = field(default_factory=dict)  # question term weights (shared)
    parts: list[float] = field(default_factory=list)  # how well it answers each part
    order: int = 0  # reading order among the evidence's passages (several share a line)
    said: str = ""  # what it says, for the embedder: its sentence, and the words that
    # finish it after the code it introduces ("You can set `x`:" [code] "and then...")

    @property
    def words(self) -> int:
        return word_count(self.text)

    @property
    def section(self) -> int:
        """Chunk line of the heading it sits under (-1: none in its chunk)."""
        return self.block.heading_line

    @property
    def entry(self) -> bool:
        """It sits in a definition-list entry (`name` then ": what it is") or an option."""
        return self.block.entry

    @property
    def group(self) -> int:
        """Which entry: blocks indented under one share it."""
        return self.block.group



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
        heading = " > ".join(h for h in (chunk.heading or "", blocks[sentence.block].heading)
                             if h)
        in_chunk.append(Passage(none, 0, sentence, text,
                                (chunk.start_line + sentence.first, chunk.start_line + last),
                                _terms(text), heading, _terms(heading), blocks[sentence.block],
                                order=len(in_chunk)))
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
                    (_DIRECTIVE.search(p.sentence.text) or _TO_DO.match(p.sentence.text))
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
                q.sentence.block == prev.sentence.block and prev.text == prev.sentence.text)
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


# --- whether a passage holds the kind of answer asked for -------------------------------------

_CODE_SPAN = re.compile(r"`([^`]+)`")
_REASON = re.compile(r"(?i)\b(?:because|so\s+that|otherwise|to\s+avoid|in\s+order\s+to|"
                     r"that\s+way|this\s+way|which\s+means|as\s+a\s+result|since)\b")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)*\b")
_POLAR = re.compile(r"(?i)\b(?:not|no|never|cannot|must|only|always|instead)\b|n't\b")
_EFFECT = re.compile(r"(?i)\b(?:will|raises?|returns?|responds?|fails?|rejects?|ignored|"
                     r"overrides?|replaced|an\s+error)\b")


def has_kind(p: Passage, wants: frozenset[str], asked: set[str], own: bool = False,
             defines: frozenset[str] = frozenset()) -> bool:
    """Whether the quote (run on through its window, unless own) holds something of a
    wanted kind that the question did not already say; a definition (of the thing named
    by ``defines``) only counts in the passage's own sentence."""
    text = p.text if own else " ".join([p.text, *(w.text for w in p.window)])
    if "code" in wants and ("\n" in text or any(
            not set(tokens(span)) <= asked for span in _CODE_SPAN.findall(text))
            or _named_section(p, asked)):
        return True
    if "number" in wants and any(n not in asked for n in _NUMBER.findall(text)):
        return True
    if "version" in wants and any(f not in asked for f in FACT.findall(text + p.heading)):
        return True
    if "definition" in wants and defines and (defines_term(p.sentence.text, defines)
                                              or _named_section(p, set(), defines)):
        return True
    if "polar" in wants and _POLAR.search(p.sentence.text if own else text):
        return True
    if "effect" in wants and _EFFECT.search(p.sentence.text if own else text):
        return True
    return "reason" in wants and bool(_REASON.search(text))


def _named_section(p: Passage, asked: set[str], defines: frozenset[str] = frozenset()) -> bool:
    """Whether the passage sits in a section named by an identifier the question does not
    say ("## server.port"): on a reference page, what to set is the section's name. With
    ``defines``: named by the thing the question asks to define ("What does the base
    option do?" and "## base"), whose section says what it is."""
    name = p.block.heading.rsplit(" > ", 1)[-1].strip()
    if p.section < 0 or not NAME_HEADING.match(name):
        return False
    if defines:
        return bool(_terms(name)) and _terms(name) <= defines and _opens_section(p)
    return not set(tokens(name.strip("`"))) <= asked


def _opens_section(p: Passage) -> bool:
    """Whether the passage is its section's first sentence of prose (only blank lines, list
    items and values stated alone, such as an option's type and default, lie between it and
    the heading)."""
    lines = p.evidence.chunk.text.split("\n")
    between = lines[p.section + 1:p.sentence.first]
    if p.block.kind != "prose" or any(line.strip() and not BULLET.match(line)
                                      and not is_labelled_fact(line) for line in between):
        return False
    opening = tokens(lines[p.sentence.first])[:2]
    return opening == tokens(p.sentence.text)[:2]


# "A _leaf bundle_ is a directory that...", "leaf bundle: A leaf bundle is...": a sentence
# whose subject names the thing and little else ("Like a leaf, a leaf bundle is..." does
# not say what it is).
_DEFINES = re.compile(r"(?i)^(?P<subject>.{1,80}?)\s+(?:is|are|means|refers\s+to|stands\s+for|"
                      r"represents)\s")
DEFINITION_SUBJECT_WORDS = 8


def defines_term(sentence: str, defines: frozenset[str]) -> bool:
    """Whether the sentence says what the thing named by these (stemmed) words is."""
    match = _DEFINES.match(sentence.replace("*", "").replace("_", " ").replace("`", ""))
    if not match:
        return False
    subject = match.group("subject")
    named = _terms(subject)
    return len(subject.split()) <= DEFINITION_SUBJECT_WORDS and "," not in subject \
        and defines <= named and len(named - defines) <= 1


RANK_PRIOR = 0.05

# A sentence that tells the reader what to do ("you can set `x`", "use `y`") answers a
# how-question; one that only restates the problem, or asks a question, does not.
_DIRECTIVE = re.compile(
    r"(?i)\byou\s+(?:can|could|need\s+to|should|shouldn't|must|have\s+to|only\s+need)\b"
    r"|(?:^|[.:]\s+)(?:use|set|pass|declare|add|import|call|run|install|create)\s"
    r"|\bby\s+(?:setting|passing|using|adding|declaring|calling)\b")
# ..."To stream events, use `yield`": a part that asks how is answered by this form too.
_TO_DO = re.compile(r"(?i)^to\s[^,]{1,80},\s+(?:use|set|pass|declare|add|import|call|run"
                    r"|install|create)\s")
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
    if "code" in wants and _DIRECTIVE.search(p.sentence.text):
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
