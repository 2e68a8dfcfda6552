"""The best passage: a rule-free answer that every answer method must beat.

It quotes, verbatim, one contiguous passage of the top evidence section: the paragraph,
list, table or code block (with the sentence that leads into it) whose words best match
the question, weighted by how rare each question word is among that section's passages,
and its neighbours in the section up to the length cap (what follows it first, then what
comes before it). Nothing in it knows a kind of
question or of page; its only constant is the length cap.
``rag eval --generator passage`` measures it beside the default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rag.answer.quoting import code_fence
from rag.core.records import Evidence
from rag.core.text import leads_in, query_terms, terms, word_count
from rag.reader.formats import quote_blocks
from rag.reader.inline import clean_inline, show_links
from rag.reader.passages import Block
from rag.stores.lexical import bm25_idf

# Longest quote, in words: about what a reader takes in at a glance (a long list or code
# block is cut at a line boundary).
MAX_WORDS = 150


@dataclass(frozen=True)
class Unit:
    """Blocks of one passage: a paragraph, a list, a table or a code block."""

    blocks: tuple[Block, ...]

    @property
    def kind(self) -> str:
        return self.blocks[-1].kind


def units(blocks: Sequence[Block]) -> list[Unit]:
    """Consecutive list items (or table rows) form one unit; a paragraph that leads in
    (ends in ":" or "...") leads into the list, table or code block right after it and
    joins it."""
    out: list[list[Block]] = []
    for block in blocks:
        if out and _continues(out[-1], block):
            out[-1].append(block)
        else:
            out.append([block])
    return [Unit(tuple(u)) for u in out]


def _continues(unit: list[Block], block: Block) -> bool:
    """Whether ``block`` goes on with the unit just before it (no more than one blank
    line between): the next item of its list or row of its table, or what its lead-in
    paragraph introduces."""
    previous = unit[-1]
    if block.first > previous.last + 2:
        return False
    if block.kind == previous.kind:
        return block.kind in ("item", "row")
    return previous.kind == "prose" and len(unit) == 1 and block.kind != "prose" \
        and leads_in(previous.lines[-1])


def _shown(block: Block) -> list[str]:
    """A block's lines as the answer shows them (code fenced, prose without markup)."""
    if block.kind == "code":
        body = list(block.lines)
        while body and not body[-1].strip():
            body.pop()
        fence = code_fence(body)
        return [fence, *body, fence]
    return [show_links(clean_inline(" ".join(line.strip() for line in block.lines)))]


def _capped(unit: Unit) -> tuple[str, int]:
    """The unit's text, cut at a block boundary (or within code at a line) once it passes
    MAX_WORDS; and the last chunk line it quotes."""
    parts: list[str] = []
    words, last = 0, unit.blocks[0].first
    for block in unit.blocks:
        shown = _shown(block)
        size = word_count("\n".join(shown))
        if parts and words + size > MAX_WORDS:
            if block.kind != "code":
                break
            keep = max(0, MAX_WORDS - words)
            body = shown[1:-1]
            cut, total = 0, 0
            while cut < len(body) and total + word_count(body[cut]) <= keep:
                total += word_count(body[cut])
                cut += 1
            if cut:
                parts.append("\n".join([shown[0], *body[:cut], shown[-1]]))
                last = block.first + cut
            break
        parts.append("\n".join(shown))
        words += size
        last = block.last
    return "\n".join(parts), last


def best_unit(question: str, found: Sequence[Unit]) -> int | None:
    """Which unit's words cover the question best (idf over the section's units)."""
    query = set(query_terms(question))
    if not found or not query:
        return 0 if found else None
    held = [terms(" ".join(line for b in u.blocks for line in b.lines)) & query for u in found]
    n = len(found)
    idf = {t: bm25_idf(sum(t in h for h in held), n) for t in query}
    scores = [sum(idf[t] for t in h) for h in held]
    return max(range(n), key=lambda i: (scores[i], -i))


def best_passage(question: str, blocks: Sequence[Block]) -> Unit | None:
    """The best unit and its neighbours in its section while the quote stays within
    MAX_WORDS: the units after it first (a reader who finds the place reads on: a
    definition, then its details or example), then those before it (what it follows
    from). A section that fits is quoted whole."""
    found = units(blocks)
    first = best_unit(question, found)
    if first is None:
        return None
    heading = found[first].blocks[0].heading
    sizes = [word_count(_capped(u)[0]) for u in found]
    lo, hi, words = first, first + 1, sizes[first]

    def fits(i: int) -> bool:  # within the cap, and not past a heading (another section)
        return words + sizes[i] <= MAX_WORDS and found[i].blocks[0].heading == heading

    while True:
        if hi < len(found) and fits(hi):
            words += sizes[hi]
            hi += 1
        elif lo > 0 and fits(lo - 1):
            lo -= 1
            words += sizes[lo]
        else:
            return Unit(tuple(b for u in found[lo:hi] for b in u.blocks))


def best_quote(question: str, top: Evidence) -> tuple[str, tuple[int, int]] | None:
    """The best passage of one evidence section as (text, its first and last file line)."""
    chunk = top.chunk
    unit = best_passage(question, quote_blocks(chunk))
    if unit is None:
        return None
    text, last = _capped(unit)
    if not text.strip():
        return None
    return text, (chunk.start_line + unit.blocks[0].first, chunk.start_line + last)
