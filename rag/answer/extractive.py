"""Extractive answers: quote the evidence passage that answers the question; no model.

Sentences are scored by rag/answer/scoring.py. The answer quotes the best passage verbatim, from
its section's opening when that is a few words before it (or from the sentence before it,
when it points back: "So, ..."), running on through its section, plus the code block, list
or table that a sentence ending in ":" introduces; a question in parts gets a quote for each
part the first leaves open, and a how-question whose quote ends its section without showing
how gets the next section's opening. Each quote carries the file lines it came from, so its
citation is line-precise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from rag.answer.leads import next_section, section_lead
from rag.answer.questions import (
    MAX_PARTS,
    Part,
    answer_kinds,
    asks_when,
    defined_terms,
    question_parts,
)
from rag.answer.scoring import (
    WINDOW_WORDS,
    Passage,
    PassageScorer,
    defines_term,
    is_release_note,
    share,
)
from rag.core.text import query_terms, word_count
from rag.reader.markup import version_marker
from rag.reader.passages import FACT, NAME_HEADING, is_labelled_fact

__all__ = ["PassageScorer", "Quote", "answer_kinds", "choose"]

# --- choosing what to quote ------------------------------------------------------------------

ANSWER_WORDS = 130  # budget for the whole answer, code included
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
    """A version or date that lives only in a heading above the quote, or in a version
    marker ({{< new-in 0.140.0 >}}), is part of the answer to "since when"."""
    text, lines = quote or (p.text, p.lines)
    if not asks_when(question) or FACT.search(text):
        return text, lines
    chunk = p.evidence.chunk
    block = p.block
    # A version marker in the chunk dates its whole section (a heading's fact, only the
    # lines near it), so its line is cited with the quote however far above it stands.
    marker = block.fact_line >= 0 and bool(
        version_marker(chunk.text.split("\n")[block.fact_line]))
    near = block.fact_line >= 0 and (marker or p.sentence.first - block.fact_line <= HEADING_REACH)
    facts = [seg for seg in p.heading.split(" > ") if FACT.search(seg)]
    fact = block.fact if near and block.fact else (facts[-1] if facts else "")
    if not fact:
        return text, lines
    if near:
        lines = (chunk.start_line + block.fact_line, lines[1])
    return f"{fact}: {text}", lines


NAME_REACH = 2  # the quote starts this many lines below the heading, at most


def _with_heading_name(p: Passage, quote: tuple[str, tuple[int, int]],
                       ) -> tuple[str, tuple[int, int]]:
    """A quote that opens a section named by one identifier starts with that name (unless
    its first line says it), and its lines with the heading's."""
    text, lines = quote
    name = p.block.heading.split(" > ")[-1].strip()
    if p.section < 0 or not NAME_HEADING.match(name) or name.strip("`") in text.split("\n")[0]:
        return quote
    heading_line = p.evidence.chunk.start_line + p.section
    if not 0 < lines[0] - heading_line <= NAME_REACH:
        return quote
    return f"{name}: {text}", (heading_line, lines[1])


def _gap(before: str) -> str:
    """What goes between a quote and the sentence after it: a line break when the quote
    ends in the lines of a block (a passage's block follows its sentence on new lines)."""
    last = before.rsplit("\n", 1)
    return "\n" if len(last) == 2 and not last[1].rstrip().endswith((".", "!", "?")) else " "


def _between(prev: Passage, nxt: Passage, text: str) -> str:
    """What goes between a quoted passage and the next: a list item (or a value stated alone,
    "**Default**: `None`") is a line of its own, so the paragraph after a list (or after the
    list, table or code a sentence brought), or an item after a paragraph, starts a new
    line; otherwise as _gap says."""
    item = nxt.block is not prev.block and ("item" in (prev.block.kind, nxt.block.kind)
                                             or is_labelled_fact(prev.text))
    return "\n" if item or prev.text != prev.sentence.text else _gap(text)


def _joined(passages: Sequence[Passage]) -> str:
    """Passages quoted one after the other, each gap as _between says."""
    text = passages[0].text
    for a, b in pairwise(passages):
        text += _between(a, b, text) + b.text
    return text


def _window_quote(p: Passage, limit: int = WINDOW_WORDS, stop: int = 0,
                  ) -> tuple[str, tuple[int, int], int]:
    """The passage run on through its window, up to ``limit`` words, before line ``stop``."""
    taken, words = [p], p.words
    for q in p.window:
        if words + q.words > limit or (stop and q.lines[1] >= stop) or _points_elsewhere(q):
            break
        taken.append(q)
        words += q.words
    text = _joined(taken)
    return text, (p.lines[0], taken[-1].lines[1]), word_count(text)


def run_on_lines(p: Passage) -> tuple[int, int]:
    """The file lines a first quote of the passage covers, run on through its window."""
    return _window_quote(p)[1]


# A question in parts ("Where are its docs, and will its startup code run?") gets a quote
# for each part that the first quote leaves unanswered.
PART_COVERED = 0.6  # a part whose words (idf-weighted) the quotes hold this much is answered
PART_MATCH = 1.0  # a quote for a part must match it this well (words + cosine + kind)...
PART_FLOOR = 0.5  # ...and score at least this share of the first quote on the whole question
FIRST_PART_SHARE = 0.5  # the first quote matches some part this share as well as the best does


def _overlaps_chosen(p: Passage, chosen: Sequence[Passage]) -> bool:
    return any(q.evidence.label == p.evidence.label and q.lines[0] <= p.lines[1]
               and p.lines[0] <= _window_quote(q)[1][1] for q in chosen)


def _answer_to_part(index: int, part: Part, usable: Sequence[Passage],
                    chosen: Sequence[Passage], taken: Sequence[Passage], covered: set[str],
                    best: Passage, words: int, dated: bool,
                    asked_facts: set[str]) -> Passage | None:
    """The passage that best answers one part of the question, if the quotes so far do not
    and one answers it well enough to quote; None otherwise. A part asking which version
    is answered once a quote names one (``dated``)."""
    if len(chosen) >= MAX_PARTS or share(part.terms, covered, best.idf) >= PART_COVERED \
            or dated and "version" in part.kinds:
        return None
    fits = [p for p in usable if len(p.parts) > index and words + p.words <= ANSWER_WORDS
            and not _overlaps_chosen(p, taken)]
    found = [p for p in fits
             if p.parts[index] >= PART_MATCH and p.answer >= PART_FLOOR * best.answer]
    if not found:
        return None
    return max(found, key=lambda p: (p.parts[index], p.answer))


# "Of course, you can also install them manually": another way than the one the section
# gave first, which a first quote should not leave out.
_ALTERNATIVE = re.compile(r"(?i)^(?:of\s+course,?\s+|but\s+|and\s+)?(?:you|we)\s+"
                          r"(?:can|could|may|might)\s+also\b|^alternatively\b|^also\b")
ALTERNATIVE_SHARE = 0.8  # of its score that such a sentence keeps as the first quote


def first_candidates(question: str, passages: Sequence[Passage],
                     parts: Sequence[Part] | None = None,
                     ) -> tuple[list[Passage], list[Passage]]:
    """The quotable passages, best first, and those of them the first quote is chosen from.

    The first quote weighs where its chunk ranked; further ones only need to match. For a
    question in parts it must answer one of them: a passage that matches the whole
    question's words but no part of it well answers nothing."""
    usable = sorted((p for p in passages if p.words <= MAX_PASSAGE_WORDS and p.score > 0
                     and not p.sentence.continues),  # "...you write:" only runs on a quote
                    key=lambda p: (-p.answer, p.rank, p.lines[0]))
    parts = question_parts(question) if parts is None else parts
    tops = [max(p.parts[i] if len(p.parts) > i else 0.0 for p in usable)
            for i in range(len(parts))] if usable else []
    first = [p for p in usable if any(len(p.parts) > i and p.parts[i] >= FIRST_PART_SHARE * top > 0
                                      for i, top in enumerate(tops))] or usable
    return usable, first


# "Read more about `useState` composable.", "find more information in the Layouts section":
# a sentence that only points elsewhere (and brings no code or list) answers nothing.
_POINTER = re.compile(r"(?i)^(?:you\s+can\s+)?(?:read|learn|find\s+out)\s+more\b"
                      r"|\b(?:find|see|read|get)\s+more\s+(?:information|details|info)\s+"
                      r"(?:in|on|at|about)\b|^(?:see|check\s+out|refer\s+to)\b"
                      r"|^for\s+more\s+(?:details|information|info)\b")
POINTER_SHARE = 0.5  # of its score that such a sentence keeps as the first quote


def _points_elsewhere(p: Passage) -> bool:
    return "\n" not in p.text and bool(_POINTER.search(p.sentence.text))


def first_score(p: Passage) -> float:
    """What the first quote is chosen by: how well it answers, times how far search trusts
    its chunk (less for a sentence offering another way, or only pointing elsewhere)."""
    share = ALTERNATIVE_SHARE if _ALTERNATIVE.match(p.sentence.text) else 1.0
    return p.answer * p.place * share * (POINTER_SHARE if _points_elsewhere(p) else 1.0)


def choose(question: str, passages: Sequence[Passage]) -> list[Quote]:
    """The best passage run on through its section (for a question in parts, one that
    answers some part); then a quote for each part of a question in parts that it leaves
    open (three quotes at most); for a how-question whose quote shows no code, the opening
    of the next section on the page; then, while there is room, one more from another page
    that scores nearly as well and covers question words the first did not. Adjacent quotes
    of one chunk merge."""
    parts = question_parts(question)
    usable, first = first_candidates(question, passages, parts)
    if not usable:
        return []
    query = set(query_terms(question))
    best = max(first, key=first_score)
    usable.remove(best)
    # A further quote says something itself: no sentence that only points elsewhere, and a
    # changelog entry only in an answer about versions.
    dates = asks_when(question)
    usable = [p for p in usable if not _points_elsewhere(p) and (
        dates or not is_release_note(p.evidence.chunk.source_path, p.heading))]
    usable.insert(0, best)
    defines = defined_terms(question)  # a sentence saying what X is needs no lead-in
    lead = [] if defines and defines_term(best.sentence.text, defines) else section_lead(
        best, passages)
    chosen = [best]
    covered = best.terms.union(*(w.terms for w in [*best.window, *lead])) | best.heading_terms
    best_text, (_, best_end), best_words = _window_quote(best)
    words = best_words + sum(q.words for q in lead)
    asked_facts = set(FACT.findall(question))
    dated = any(f not in asked_facts for f in FACT.findall(" ".join(
        [_with_heading_fact(best, question, (best_text, best.lines))[0],
         *(q.text for q in lead)])))
    for index, part in enumerate(parts):
        p = _answer_to_part(index, part, usable, chosen, [*chosen, *lead], covered, best,
                            words, dated, asked_facts)
        if p is not None:
            chosen.append(p)
            covered |= p.terms.union(*(w.terms for w in p.window))
            words += p.words
    if "code" in answer_kinds(question) and "`" not in best_text and "\n" not in best_text:
        follow = next_section(best, best_end, passages)
        if follow is not None and words + follow.words <= ANSWER_WORDS:
            chosen.append(follow)
            words += follow.words
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
        if p.evidence.chunk.source_path == best.evidence.chunk.source_path:
            continue  # the first quote runs on through its section; the rest of its page
            # holds neighbouring sections more often than what the question asked
        chosen.append(p)
        covered |= p.terms
        words += p.words
    quotes: list[Quote] = []  # (a lead opens its section, so no other quote runs into it)
    for p in sorted(chosen, key=lambda c: (c.rank, c.lines[0])):
        if p is best:
            text, lines = _window_quote(p)[:2]
            if lead:
                opening = _joined(lead)
                text = opening + _between(lead[-1], p, opening) + text
                lines = (lead[0].lines[0], lines[1])
            text, lines = _with_heading_fact(p, question, _with_heading_name(p, (text, lines)))
        else:  # a further quote runs on a little too, short of the next quote it meets
            stop = min((c.lines[0] for c in chosen if c.evidence.label == p.evidence.label
                        and c.lines[0] > p.lines[1]), default=0)
            text, lines = _with_heading_fact(p, question, _with_heading_name(
                p, _window_quote(p, FURTHER_WINDOW_WORDS, stop)[:2]))
        prev = quotes[-1] if quotes else None
        if prev is not None and prev.label == p.evidence.label and 0 <= lines[0] - prev.lines[1] <= 2:
            gap = "\n" if p.block.kind in ("item", "row") else _gap(prev.text)  # a line each
            quotes[-1] = Quote(prev.text + gap + text, prev.label, (prev.lines[0], lines[1]))
        else:
            quotes.append(Quote(text, p.evidence.label, lines))
    return quotes
