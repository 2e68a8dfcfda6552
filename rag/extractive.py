"""Extractive answers: quote the evidence passage that answers the question; no model.

Evidence chunks are read into quotable sentences with their lines (rag/passages.py), and
every sentence is scored against the question: the embedder's cosine, an overlap of
stemmed content words (over the sentence and the window it runs on into), the heading
path, and whether it holds the kind of thing the question asks for. The answer quotes the
best passage verbatim, running on through its section, plus the code block, list or table
that a sentence ending in ":" introduces. Each quote carries the file lines it came from,
so its citation is line-precise.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rag.passages import (
    FACT,
    Sentence,
    attachment,
    quote,
    read_blocks,
    sentences,
    split_sentences,
)
from rag.questions import MAX_PARTS, Part, answer_kinds, asks_when, query_terms, question_parts
from rag.questions import terms as _terms
from rag.records import Evidence
from rag.text import tokens

__all__ = ["ExtractiveGenerator", "PassageScorer", "answer_kinds", "choose", "split_sentences"]

if TYPE_CHECKING:
    from rag.embedding import Embedder
    from rag.generation import GenerationResult

# --- scoring ---------------------------------------------------------------------------------


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
    dense: float = 0.0
    lexical: float = 0.0
    heading_match: float = 0.0
    window_lexical: float = 0.0
    kind_match: float = 0.0  # the quote holds the kind of thing the question asks for
    score: float = 0.0
    answer: float = 0.0  # score plus how much the quote itself reads as an answer (choose)
    place: float = 1.0  # how much the retriever trusts its chunk, against the best (choose)
    section: int = -1  # chunk line of the heading it sits under
    window: list[Passage] = field(default_factory=list)  # what a quote of it runs on to
    idf: dict[str, float] = field(default_factory=dict)  # question term weights (shared)
    parts: list[float] = field(default_factory=list)  # how well it answers each part

    @property
    def words(self) -> int:
        return len(self.text.split())


_VECTORS: dict[tuple[str, str], np.ndarray] = {}  # (embedder, sentence) -> vector
_VECTOR_CACHE = 50_000


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

    def passages(self, question: str, evidence: Sequence[Evidence]) -> list[Passage]:
        """Every quotable passage of the evidence, scored, best first."""
        found: list[Passage] = []
        for rank, ev in enumerate(evidence):
            chunk = ev.chunk
            blocks = read_blocks(chunk.text, chunk.start_line == 1)
            in_chunk: list[Passage] = []
            for sentence in sentences(blocks):
                attached = attachment(blocks, sentence)
                text, last = quote(sentence, attached)
                heading = " > ".join(h for h in (chunk.heading or "",
                                                  blocks[sentence.block].heading) if h)
                in_chunk.append(Passage(ev, rank, sentence, text,
                                        (chunk.start_line + sentence.first,
                                         chunk.start_line + last),
                                        _terms(text), heading,
                                        section=blocks[sentence.block].heading_line))
            _link_windows(in_chunk)
            found.extend(in_chunk)
        query = query_terms(question)
        if not found or not query:
            return []
        n = len(found)
        df = Counter(t for p in found for t in set(p.terms) & set(query))
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in query}
        total = sum(idf.values()) or 1.0
        weights = {t: w / total for t, w in idf.items()}
        for p in found:
            p.idf = weights
            p.lexical = sum(idf[t] for t in query if t in p.terms) / total
            window_terms = set().union(*(w.terms for w in p.window)) | p.terms
            p.window_lexical = sum(idf[t] for t in query if t in window_terms) / total
            head = _terms(p.heading)
            p.heading_match = sum(idf[t] for t in query if t in head) / total
        wants = answer_kinds(question)
        asked = set(tokens(question))
        for p in found:
            lexical = (1 - WINDOW_SHARE) * p.lexical + WINDOW_SHARE * p.window_lexical
            p.kind_match = float(bool(wants) and _has_kind(p, wants, asked))
            p.score = (W_LEXICAL * lexical + W_HEADING * p.heading_match
                       + W_KIND * p.kind_match) / (1 + RANK_PRIOR * p.rank)
        if self.embedder is not None:
            # Only the lexically likeliest sentences are embedded: a sentence sharing no
            # word and no heading with the question rarely answers it, and embedding every
            # sentence of eight chunks costs more than the whole search.
            found.sort(key=lambda p: -p.score)
            head = found[:EMBED_TOP]
            vectors = self._embed([question] + [p.sentence.text for p in head])
            for p, sim in zip(head, vectors[1:] @ vectors[0]):
                p.dense = float(sim)
                p.score += W_DENSE * p.dense / (1 + RANK_PRIOR * p.rank)
        top = max(e.hit.score for e in evidence) or 1.0
        for p in found:
            p.answer = p.score + answer_bonus(p, wants, asked)
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
        kinds = part.kinds - {"code"}  # "how do I" is the whole question's kind
        scores = []
        for p in found:
            score = _share(part.terms, p.terms | _terms(p.heading), idf)
            if kinds and _has_kind(p, kinds, asked, own=True):
                score += W_PART_KIND
            scores.append(score)
        if self.embedder is not None:
            order = sorted(range(len(found)), key=lambda i: -scores[i])[:PART_EMBED_TOP]
            vectors = self._embed([part.text] + [found[i].sentence.text for i in order])
            for i, sim in zip(order, vectors[1:] @ vectors[0]):
                scores[i] += float(sim)
        for p, score in zip(found, scores):
            p.parts.append(score)


EMBED_TOP = 12  # sentences embedded per question
WINDOW_WORDS = 70  # a quote runs on from its best sentence up to this many words
WINDOW_SHARE = 0.3  # weight of the whole window's word overlap against the sentence's


def _link_windows(in_chunk: Sequence[Passage]) -> None:
    """Give each passage the sentences that follow it in its section, up to WINDOW_WORDS."""
    for i, p in enumerate(in_chunk):
        words, prev = p.words, p
        for q in in_chunk[i + 1:]:
            # The next sentence of one paragraph may share the line the last one ended on.
            follows = q.lines[0] > prev.lines[1] or (
                q.sentence.block == prev.sentence.block and prev.text == prev.sentence.text)
            if q.section != p.section or not follows or words + q.words > WINDOW_WORDS:
                break
            p.window.append(q)
            words, prev = words + q.words, q


W_DENSE, W_LEXICAL, W_HEADING, W_KIND = 0.3, 0.35, 0.35, 0.1
PLACE_POWER = 1.0  # how strongly the retriever's score of a chunk weighs in the first quote
CHANGELOG_PRIOR = 0.8  # a changelog entry says when something changed; a page says how
_CHANGELOG = re.compile(r"(?i)^(?:change-?log|changes|release-?notes|releases|history|news)"
                        r"(?:\.\w+)?$")


def place_prior(ev: Evidence, top: float) -> float:
    """How far to trust a quote's place: its chunk's retrieval score against the best
    evidence's (search ranks whole sections better than one sentence's words do), less
    for a changelog, whose entries share a feature's words without explaining it."""
    prior = max(ev.hit.score / top, 1e-6) ** PLACE_POWER if top > 0 else 1.0
    if _CHANGELOG.match(ev.chunk.source_path.rsplit("/", 1)[-1]):
        prior *= CHANGELOG_PRIOR
    return prior

# --- whether a passage holds the kind of answer asked for -------------------------------------

_CODE_SPAN = re.compile(r"`([^`]+)`")
_REASON = re.compile(r"(?i)\b(?:because|so\s+that|otherwise|to\s+avoid|in\s+order\s+to|"
                     r"that\s+way|this\s+way|which\s+means|as\s+a\s+result|since)\b")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)*\b")


def _has_kind(p: Passage, wants: frozenset[str], asked: set[str], own: bool = False) -> bool:
    """Whether the quote (run on through its window, unless own) holds something of a
    wanted kind that the question did not already say."""
    text = p.text if own else " ".join([p.text, *(w.text for w in p.window)])
    if "code" in wants and ("\n" in text or any(
            not set(tokens(span)) <= asked for span in _CODE_SPAN.findall(text))):
        return True
    if "number" in wants and any(n not in asked for n in _NUMBER.findall(text)):
        return True
    if "version" in wants and any(f not in asked for f in FACT.findall(text + p.heading)):
        return True
    return "reason" in wants and bool(_REASON.search(text))


RANK_PRIOR = 0.05

# A sentence that tells the reader what to do ("you can set `x`", "use `y`") answers a
# how-question; one that only restates the problem, or asks a question, does not.
_DIRECTIVE = re.compile(
    r"(?i)\byou\s+(?:can|could|need\s+to|should|shouldn't|must|have\s+to|only\s+need)\b"
    r"|(?:^|[.:]\s+)(?:use|set|pass|declare|add|import|call|run|install|create)\s"
    r"|\bby\s+(?:setting|passing|using|adding|declaring|calling)\b")
W_OWN_KIND = 0.06  # the sentence (with what it introduces) holds the kind asked for
W_DIRECTIVE = 0.04  # the sentence says what to do, for a question asking how


def answer_bonus(p: Passage, wants: frozenset[str], asked: set[str]) -> float:
    """How much more a passage reads as an answer than its match score says: it holds,
    itself rather than the sentences after it, the kind of thing the question asks for."""
    if p.sentence.text.endswith("?"):
        return -W_OWN_KIND
    bonus = 0.0
    if wants and _has_kind(p, wants, asked, own=True):
        bonus += W_OWN_KIND
    if "code" in wants and _DIRECTIVE.search(p.sentence.text):
        bonus += W_DIRECTIVE
    return bonus / (1 + RANK_PRIOR * p.rank)


# --- choosing what to quote ------------------------------------------------------------------

ANSWER_WORDS = 110  # budget for the whole answer, code included
FURTHER_WINDOW_WORDS = 40  # a second or third quote runs on up to this many words
MAX_PASSAGE_WORDS = 150  # a passage longer than this is never quoted
EXTRACTIVE_STATEMENTS = 2
RELATIVE_FLOOR = 0.8  # a further passage must score this share of the best one
MIN_NEW = 0.15  # ...and cover this share (idf-weighted) of the question not yet covered,
MIN_NEW_TERMS = 1  # in at least this many question words
SECOND_LEXICAL = 0.2  # and hold this share (idf-weighted) of the question's words itself
HEADING_REACH = 12  # a fact heading this many lines above a quote is quoted with it


@dataclass(frozen=True)
class Quote:
    """One statement of an extractive answer: verbatim text, its evidence, its file lines."""

    text: str
    label: str
    lines: tuple[int, int]


def _with_heading_fact(p: Passage, question: str,
                       quote: tuple[str, tuple[int, int]] | None = None,
                       ) -> tuple[str, tuple[int, int]]:
    """A version or date that lives only in the heading path is part of the answer."""
    text, lines = quote or (p.text, p.lines)
    if not asks_when(question):
        return text, lines
    facts = [seg for seg in p.heading.split(" > ") if FACT.search(seg)]
    if not facts or FACT.search(text):
        return text, lines
    chunk = p.evidence.chunk
    blocks = read_blocks(chunk.text, chunk.start_line == 1)
    block = blocks[p.sentence.block]
    if block.fact_line >= 0 and p.sentence.first - block.fact_line <= HEADING_REACH:
        lines = (chunk.start_line + block.fact_line, lines[1])
    return f"{facts[-1]}: {text}", lines


def _window_quote(p: Passage, limit: int = WINDOW_WORDS, stop: int = 0,
                  ) -> tuple[str, tuple[int, int], int]:
    """The passage run on through its window, up to ``limit`` words, before line ``stop``."""
    parts, last, words = [p.text], p.lines[1], p.words
    for q in p.window:
        if words + q.words > limit or (stop and q.lines[1] >= stop):
            break
        parts.append(q.text)
        last, words = q.lines[1], words + q.words
    return " ".join(parts), (p.lines[0], last), sum(
        len(t.split()) for t in parts)

# A question in parts ("Where are its docs, and will its startup code run?") gets a quote
# for each part that the first quote leaves unanswered.
PART_COVERED = 0.6  # a part whose words (idf-weighted) the quotes hold this much is answered
PART_MATCH = 1.0  # a quote for a part must match it this well (words + cosine + kind)...
PART_FLOOR = 0.5  # ...and score at least this share of the first quote on the whole question
W_PART_KIND = 0.3  # a part's match gains this when it holds the kind of thing the part asks
PART_EMBED_TOP = 16  # sentences embedded per part


def _share(terms: Sequence[str], have: set[str], idf: dict[str, float]) -> float:
    total = sum(idf.get(t, 0.0) for t in terms)
    return sum(idf.get(t, 0.0) for t in terms if t in have) / total if total else 0.0


def _overlaps_chosen(p: Passage, chosen: Sequence[Passage]) -> bool:
    return any(q.evidence.label == p.evidence.label and q.lines[0] <= p.lines[1]
               and p.lines[0] <= _window_quote(q)[1][1] for q in chosen)


def _answer_to_part(index: int, part: Part, usable: Sequence[Passage],
                    chosen: Sequence[Passage], taken: Sequence[Passage], covered: set[str],
                    best: Passage, words: int) -> Passage | None:
    """The passage that best answers one part of the question, if the quotes so far do not
    and one answers it well enough to quote; None otherwise."""
    if len(chosen) >= MAX_PARTS or _share(part.terms, covered, best.idf) >= PART_COVERED:
        return None
    found = [p for p in usable if len(p.parts) > index and p.parts[index] >= PART_MATCH
             and p.answer >= PART_FLOOR * best.answer and words + p.words <= ANSWER_WORDS
             and not _overlaps_chosen(p, taken)]
    return max(found, key=lambda p: (p.parts[index], p.answer)) if found else None


LEAD_WORDS = 30  # a section's opening this short before the best sentence is quoted too


def _section_lead(best: Passage, passages: Sequence[Passage]) -> list[Passage]:
    """The sentences that open the best passage's section before it, when the quote should
    start there: docs state a section's point first ("You shouldn't pin starlette."), then
    explain, so a best sentence a few words into its section is quoted from the start."""
    before = sorted((p for p in passages if p.evidence is best.evidence
                     and p.section == best.section and p.lines[1] < best.lines[0]),
                    key=lambda p: p.lines[0])
    if not before or before[0].section < 0 or sum(p.words for p in before) > LEAD_WORDS:
        return []
    run = [*before, best]
    return before if all(b in a.window for a, b in itertools.pairwise(run)) else []


def choose(question: str, passages: Sequence[Passage]) -> list[Quote]:
    """The best passage run on through its section, plus up to two more that score nearly
    as well and cover question words the first did not; adjacent quotes of one chunk merge."""
    usable = sorted((p for p in passages if p.words <= MAX_PASSAGE_WORDS and p.score > 0),
                    key=lambda p: (-p.answer, p.rank, p.lines[0]))
    if not usable:
        return []
    query = set(query_terms(question))
    # The first quote weighs where its chunk ranked; further ones only need to match.
    best = max(usable, key=lambda p: p.answer * p.place)
    usable.remove(best)
    usable.insert(0, best)
    lead = _section_lead(best, passages)
    chosen = [best]
    covered = best.terms.union(*(w.terms for w in [*best.window, *lead])) | _terms(best.heading)
    words = _window_quote(best)[2] + sum(q.words for q in lead)
    for index, part in enumerate(question_parts(question)):
        p = _answer_to_part(index, part, usable, chosen, [*chosen, *lead], covered, best,
                            words)
        if p is not None:
            chosen.append(p)
            covered |= p.terms.union(*(w.terms for w in p.window))
            words += p.words
    for p in usable[1:]:
        if len(chosen) >= EXTRACTIVE_STATEMENTS or p.answer < RELATIVE_FLOOR * best.answer:
            break
        if p.lexical < SECOND_LEXICAL:
            continue  # a further quote must match the question by its own words
        new = (p.terms & query) - covered
        if words + p.words > ANSWER_WORDS or len(new) < MIN_NEW_TERMS or sum(
                p.idf.get(t, 0.0) for t in new) < MIN_NEW:
            continue  # too long, or adds too little of what the question asks
        if _overlaps_chosen(p, [*chosen, *lead]):
            continue  # overlaps a quote already taken
        chosen.append(p)
        covered |= p.terms
        words += p.words
    quotes: list[Quote] = []
    for p in sorted(chosen, key=lambda c: (c.rank, c.lines[0])):
        if p is best:
            text, lines = _window_quote(p)[:2]
            if lead:
                text = " ".join([*(q.text for q in lead), text])
                lines = (lead[0].lines[0], lines[1])
            text, lines = _with_heading_fact(p, question, (text, lines))
        else:  # a further quote runs on a little too, short of the next quote it meets
            stop = min((c.lines[0] for c in chosen if c.evidence.label == p.evidence.label
                        and c.lines[0] > p.lines[1]), default=0)
            text, lines = _with_heading_fact(
                p, question, _window_quote(p, FURTHER_WINDOW_WORDS, stop)[:2])
        prev = quotes[-1] if quotes else None
        if prev is not None and prev.label == p.evidence.label and 0 <= lines[0] - prev.lines[1] <= 2:
            quotes[-1] = Quote(f"{prev.text} {text}", prev.label, (prev.lines[0], lines[1]))
        else:
            quotes.append(Quote(text, p.evidence.label, lines))
    return quotes


class ExtractiveGenerator:
    """Answers by quoting the evidence passage closest to the question (no model)."""

    name = "extractive"

    def __init__(self, embedder: Embedder | None = None,
                 scorer: PassageScorer | None = None) -> None:
        self.scorer = scorer or PassageScorer(embedder)

    def use_embedder(self, embedder: Embedder) -> None:
        """Score with this embedder from now on, unless one was given when built."""
        if self.scorer.embedder is None:
            self.scorer.embedder = embedder

    def generate(self, question: str, evidence: Sequence[Evidence]) -> GenerationResult:
        """Quote the best passage(s); each statement's quoted file lines ride along."""
        from rag.generation import GenerationResult, ModelAnswer, ModelStatement

        quotes = choose(question, self.scorer.passages(question, evidence))
        statements = [ModelStatement(text=q.text, evidence=[q.label]) for q in quotes]
        answer = ModelAnswer(statements=statements, insufficient_evidence=not statements)
        return GenerationResult(answer, 0, 0, 1, "extractive",
                                quotes=tuple(q.lines for q in quotes))
