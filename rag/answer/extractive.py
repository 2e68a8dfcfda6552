"""Extractive answers: quote the evidence passage that answers the question; no model.

Sentences are scored by rag/answer/scoring.py; the best one chooses the place. The first
quote is the whole passage that holds it (its paragraph, list, table or code block), then
what follows in its section, read on sentence by sentence into the next paragraph, and what
comes just before it, within the answer's words (or, when that passage alone is too long,
the sentence read on through its section, from its section's opening when that is a few
words before it). A question in parts gets a quote for each part the first leaves open.
Each quote carries the file lines it came from, so its citation is line-precise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from rag.answer.candidates import Passage
from rag.answer.leads import section_lead
from rag.answer.passage import Unit, units
from rag.answer.questions import (
    MAX_PARTS,
    Part,
    asks_when,
    question_parts,
)
from rag.answer.quoting import fenced
from rag.answer.scoring import (
    READ_WORDS,
    WINDOW_WORDS,
    PassageScorer,
    is_release_note,
    share,
)
from rag.answer.titles import is_label, shown_label, titles_of, titles_over, with_brought_title
from rag.core.records import Chunk
from rag.core.text import word_count
from rag.reader.formats import quote_blocks
from rag.reader.passages import BULLET, FACT, NAME_HEADING, Block, is_labelled_fact

__all__ = ["PassageScorer", "Quote", "choose", "read_further"]

# --- choosing what to quote ------------------------------------------------------------------

ANSWER_WORDS = 130  # budget for the whole answer, code included
FURTHER_WINDOW_WORDS = 40  # a second or third quote runs on up to this many words
MAX_PASSAGE_WORDS = 150  # a passage longer than this is never quoted


@dataclass(frozen=True)
class Quote:
    """One statement of an extractive answer: verbatim text, its evidence, its file lines."""

    text: str
    label: str
    lines: tuple[int, int]
    first: bool = False  # it quotes the best passage (the quote that may read on)


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
    gap = "\n" if BULLET.match(text) else " "  # a list item stays on a line of its own
    return f"{name}:{gap}{text}", (heading_line, lines[1])


def _gap(before: str) -> str:
    """What goes between a quote and the sentence after it: a line break when the quote
    ends in the lines of a block (a passage's block follows its sentence on new lines), or
    on a lead-in whose block the answer cannot show (a screenshot after "...you will see:")."""
    if before.rstrip().endswith(":"):
        return "\n"
    last = before.rsplit("\n", 1)
    return "\n" if len(last) == 2 and not last[1].rstrip().endswith((".", "!", "?")) else " "


def _between(prev: Passage, nxt: Passage, text: str) -> str:
    """What goes between a quoted passage and the next: a list item, a table row, a
    definition-list entry or a label over code (or a value stated alone, "**Default**:
    `None`") is a line of its own, so the paragraph after a list (or after the list, table
    or code a sentence brought), or an item after a paragraph, starts a new line; otherwise
    as _gap says."""
    kinds = {prev.block.kind, nxt.block.kind}
    opens_entry = nxt.block.entry and nxt.sentence.first == nxt.block.first
    item = nxt.block is not prev.block and (bool(kinds & {"item", "row"}) or opens_entry
                                             or nxt.sentence.continues  # a label over code
                                             or is_labelled_fact(prev.text))
    return "\n" if item or prev.brings else _gap(text)


def _joined(passages: Sequence[Passage]) -> str:
    """Passages quoted one after the other, each gap as _between says."""
    text = passages[0].text
    for a, b in pairwise(passages):
        text += _between(a, b, text) + b.text
    return text


def _window_quote(p: Passage, limit: int = WINDOW_WORDS, stop: int = 0, *,
                  read_on: bool = False) -> tuple[str, tuple[int, int], int]:
    """The passage run on through its window (and on, for a first quote: ``read_on``), up
    to ``limit`` words, before line ``stop``."""
    taken, words = [p], p.words
    for q in [*p.window, *(p.read_on if read_on else ())]:
        if words + q.words > limit or (stop and q.lines[1] >= stop):
            break
        taken.append(q)
        words += q.words
    text = _joined(taken)
    return text, (p.lines[0], taken[-1].lines[1]), word_count(text)


# A first quote is whole passages: the paragraph, list, table or code block that holds
# the best sentence, then what follows it in its section, and what comes before it.
BACK_WORDS = 40  # words of the section before the best passage a first quote reads back to


@lru_cache(maxsize=1024)
def _units(chunk: Chunk) -> tuple[Unit, ...]:
    return tuple(units(quote_blocks(chunk)))


def _shown(blocks: Sequence[Block], mine: Sequence[Passage], base: int,
           titles: dict[int, str] | None = None) -> tuple[str, tuple[int, int]]:
    """Blocks as a quote shows them, and the file lines from the first shown to the last: a
    prose block, list item or table row as its sentences (one ending in ':' brings what it
    introduces), and a code block that no sentence brought as the code the page shows,
    fenced."""
    text, first, last, brought, prev = "", -1, base + blocks[0].first, -1, None
    said: set[str] = set()
    for k, b in enumerate(blocks):
        if base + b.first <= brought:
            continue  # a sentence brought it, whole or cut at MAX_CODE_LINES: shown once
        opened = titles_over(titles or {}, blocks[k - 1].last if k else -1, b.first)
        if opened:  # the block opens a content tab, or its code has a title: shown over it
            text += ("\n" if text else "") + "\n".join(opened.values())
            first = base + min(opened) if first < 0 else first
            prev = None
        if text and is_label(b, blocks[k + 1:k + 2], mine):
            # the title over the next alternative's code, as the page shows it
            text += "\n" + shown_label(b)
            last, prev = base + b.last, None
            continue
        if b.kind == "code":
            code = fenced(b.lines)
            if code:
                text += ("\n" if text else "") + code
                first = base + b.first if first < 0 else first
                last, prev = base + b.last, None
            continue
        for q in mine:
            if q.block != b or q.lines[1] <= brought or q.text in said:
                continue  # (a tip repeated in each tab is quoted once)
            said.add(q.text)
            text += (_between(prev, q, text) if prev else "\n" if text else "") \
                + with_brought_title(q, blocks[k + 1:k + 2], titles or {})
            first = q.lines[0] if first < 0 else first
            last, prev = q.lines[1], q
            if q.brings:
                brought = q.lines[1]
    return text, (first, last)


def _passage_quote(p: Passage, limit: int, stop: int, passages: Sequence[Passage],
                   ) -> tuple[str, tuple[int, int]] | None:
    """The first quote as whole passages of the best one's section: its own, those after
    it while they fit (then the next paragraph's sentences or list's items, as far as they
    fit), and those before it up to BACK_WORDS; within ``limit`` words and short of file
    line ``stop``. None for a definition-list entry or an option (its quote ends with it),
    or when its own passage alone is too long or runs into ``stop``."""
    chunk = p.evidence.chunk
    found = _units(chunk)
    at = next((i for i, u in enumerate(found) if p.block in u.blocks), None)
    if at is None or p.entry:
        return None
    base = chunk.start_line
    mine = sorted((q for q in passages if q.evidence is p.evidence), key=lambda q: q.order)
    sizes = [word_count(_shown(u.blocks, mine, base)[0]) for u in found]
    if sizes[at] > limit or (stop and base + found[at].blocks[-1].last >= stop):
        return None
    heading = found[at].blocks[0].heading
    lo, hi, words, back = at, at + 1, sizes[at], 0

    def fits(i: int) -> bool:
        return words + sizes[i] <= limit and found[i].blocks[0].heading == heading \
            and not any(b.entry for b in found[i].blocks) \
            and not (stop and base + found[i].blocks[-1].last >= stop)

    while True:
        if hi < len(found) and fits(hi):
            words += sizes[hi]
            hi += 1
        elif lo > 0 and fits(lo - 1) and back + sizes[lo - 1] <= BACK_WORDS:
            lo -= 1
            words += sizes[lo]
            back += sizes[lo]
        else:
            break
    # Code read back belongs to the paragraph before it, which it shows: the quote reads
    # back to that paragraph too, or starts after the code.
    if lo < at and found[lo].blocks[0].kind == "code":
        if lo > 0 and found[lo - 1].kind == "prose" and fits(lo - 1):
            lo -= 1
            words += sizes[lo]
        while lo < at and found[lo].blocks[0].kind == "code":
            words -= sizes[lo]
            lo += 1
    blocks = [b for u in found[lo:hi] for b in u.blocks]
    text, (start, end) = _shown(blocks, mine, base, titles_of(chunk))
    if not text:
        return None
    # then the paragraph (or list) after, sentence by sentence (item by item) while they fit
    if hi < len(found) and found[hi].blocks[0].heading == heading:
        text, words, end = _read_into(found[hi], text, words, end, mine, base, limit, stop)
    return text, (start, end)


def _read_into(unit: Unit, text: str, words: int, end: int, mine: Sequence[Passage],
               base: int, limit: int, stop: int) -> tuple[str, int, int]:
    """A quote ending at file line ``end`` read on into a paragraph or list that does not
    fit whole: its sentences (items) while they fit ``limit`` words and end short of line
    ``stop``. The quote's text, words and last line."""
    if unit.kind not in ("prose", "item"):
        return text, words, end
    first, final = base + unit.blocks[0].first, base + unit.blocks[-1].last
    prev = next((q for q in reversed(mine) if q.lines[1] <= end), None)
    for q in mine:
        if not first <= q.lines[0] <= q.lines[1] <= final:
            continue
        if words + q.words > limit or (stop and q.lines[1] >= stop) \
                or q.brings:
            break
        text += (_between(prev, q, text) if prev else "\n") + q.text
        words += q.words
        end, prev = q.lines[1], q
    return text, words, end


def run_on_lines(p: Passage) -> tuple[int, int]:
    """The file lines a first quote of the passage covers, run on through its window."""
    return _window_quote(p)[1]


# A question in parts ("Where are its docs, and will its startup code run?") gets a quote
# for each part that the first quote leaves unanswered.
PART_COVERED = 0.6  # a part whose words (idf-weighted) the quotes hold this much is answered
PART_MATCH = 1.0  # a quote for a part must match it this well (words + cosine + kind)...
PART_FLOOR = 0.5  # ...and score at least this share of the first quote on the whole question


def _overlaps_chosen(p: Passage, chosen: Sequence[Passage]) -> bool:
    return any(q.evidence.label == p.evidence.label and q.lines[0] <= p.lines[1]
               and p.lines[0] <= _window_quote(q)[1][1] for q in chosen)


def _answer_to_part(index: int, part: Part, usable: Sequence[Passage],
                    chosen: Sequence[Passage], taken: Sequence[Passage], covered: set[str],
                    best: Passage, words: int, dated: bool) -> Passage | None:
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


def first_candidates(passages: Sequence[Passage]) -> list[Passage]:
    """The quotable passages, best first: the first quote is chosen from them by
    :func:`first_score` (it weighs where its chunk ranked), further ones only need to match."""
    usable = sorted((p for p in passages if p.words <= MAX_PASSAGE_WORDS and p.score > 0
                     and not p.sentence.continues),  # "...you write:" only runs on a quote
                    key=lambda p: (-p.answer, p.rank, p.lines[0]))
    return usable


def first_score(p: Passage) -> float:
    """What the first quote is chosen by: how well it answers, times how far search trusts
    its chunk."""
    return p.answer * p.place


def choose(question: str, passages: Sequence[Passage]) -> list[Quote]:
    """The best passage run on through its section, from its section's opening when that is
    a few words before it; then, for a question in parts, a quote for each part that it
    leaves open (three quotes at most). Adjacent quotes of one chunk merge."""
    parts = question_parts(question)
    usable = first_candidates(passages)
    if not usable:
        return []
    best = max(usable, key=first_score)
    usable.remove(best)
    # A changelog entry answers a part only in an answer about versions.
    if not asks_when(question):
        usable = [p for p in usable
                  if not is_release_note(p.evidence.chunk.source_path, p.heading)]
    usable.insert(0, best)
    lead = section_lead(best, passages)
    chosen = [best]
    covered = best.terms.union(*(w.terms for w in [*best.window, *lead])) | best.heading_terms
    best_text, _, best_words = _window_quote(best)
    words = best_words + sum(q.words for q in lead)
    asked_facts = set(FACT.findall(question))
    dated = any(f not in asked_facts for f in FACT.findall(" ".join(
        [best_text, *(q.text for q in lead)])))
    for index, part in enumerate(parts):
        p = _answer_to_part(index, part, usable, chosen, [*chosen, *lead], covered, best,
                            words, dated)
        if p is not None:
            chosen.append(p)
            covered |= p.terms.union(*(w.terms for w in p.window))
            words += p.words
    quotes: list[Quote] = []  # (a lead opens its section, so no other quote runs into it)
    for p in sorted(chosen, key=lambda c: (c.rank, c.lines[0])):
        # every quote runs on short of the next quote of its chunk
        stop = min((c.lines[0] for c in chosen if c.evidence.label == p.evidence.label
                    and c.lines[0] > p.lines[1]), default=0)
        if p is best:  # its passages, or it reads on, within the answer's words
            others = sum(c.words for c in chosen if c is not p)
            whole = _passage_quote(p, max(best_words, READ_WORDS - others), stop, passages)
            if whole is None:
                others += sum(q.words for q in lead)
                text, lines = _window_quote(p, max(best_words, READ_WORDS - others), stop,
                                            read_on=True)[:2]
                if lead:
                    opening = _joined(lead)
                    text = opening + _between(lead[-1], p, opening) + text
                    lines = (lead[0].lines[0], lines[1])
                whole = text, lines
            text, lines = _with_heading_name(p, whole)
        else:  # a further quote runs on a little too
            text, lines = _with_heading_name(p, _window_quote(p, FURTHER_WINDOW_WORDS, stop)[:2])
        prev = quotes[-1] if quotes else None
        if prev is not None and prev.label == p.evidence.label and 0 <= lines[0] - prev.lines[1] <= 2:
            gap = "\n" if p.block.kind in ("item", "row") else _gap(prev.text)  # a line each
            quotes[-1] = Quote(prev.text + gap + text, prev.label, (prev.lines[0], lines[1]),
                               prev.first or p is best)
        else:
            quotes.append(Quote(text, p.evidence.label, lines, p is best))
    return quotes


def read_further(quotes: Sequence[Quote], passages: Sequence[Passage], stop: int = 0,
                 ) -> list[Quote]:
    """The quotes with the first one read on into ``passages``: those of its evidence
    read one chunk further into its section (Retriever.read_on), for a first quote that
    stopped only because its hit ended. It reads on as within a chunk: the blocks that
    follow while they fit the first quote's words, then the next paragraph's sentences
    (or list's items) as far as they fit; short of file line ``stop`` (where another quote
    of the file starts)."""
    first = next((q for q in quotes if q.first), None)
    if first is None or not passages:
        return list(quotes)
    chunk = passages[0].evidence.chunk
    base, end = chunk.start_line, first.lines[1]
    mine = sorted(passages, key=lambda q: q.order)
    limit = READ_WORDS - sum(word_count(q.text) for q in quotes if q is not first)
    text, words, heading = first.text, word_count(first.text), None
    # a definition-list entry's quote reads on within its entry only
    ending = next((q for q in reversed(mine) if q.lines[1] <= end), None)
    group = ending.group if ending is not None and ending.entry else -2
    for unit in _units(chunk):
        top, bottom = base + unit.blocks[0].first, base + unit.blocks[-1].last
        if top <= end:
            heading = unit.blocks[0].heading
            continue
        if unit.blocks[0].heading != heading or (stop and bottom >= stop) \
                or any(b.entry and b.group != group for b in unit.blocks):
            break  # (a heading of the page's own, inside the section; another entry)
        shown, (_, last) = _shown(unit.blocks, mine, base)
        if not shown:
            continue
        if words + word_count(shown) <= limit:
            text, words, end = text + "\n" + shown, words + word_count(shown), last
            continue
        text, words, end = _read_into(unit, text, words, end, mine, base, limit, stop)
        break
    if end == first.lines[1]:
        return list(quotes)
    longer = Quote(text, first.label, (first.lines[0], end), True)
    return [longer if q is first else q for q in quotes]
