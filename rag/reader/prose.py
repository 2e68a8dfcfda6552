"""Sentences of a chunk's blocks: where one ends, and which are whole enough to quote.

A paragraph is split at sentence ends (rag.core.text.split_sentences: "e.g." and "i.e."
are none); a fragment, a sentence
cut short or one that only finishes the sentence before a code block is never a quote's
start. Short sentences that state one fact ("Default is `75`.") join the sentence before
them; a short first one ("Specify server port.") joins the one after it. Items and table
rows are one sentence each. rag.reader.passages reads the blocks; rag.answer.quoting adds what a
sentence ending in ":" brings.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from rag.core.text import leads_in, split_sentences
from rag.reader.inline import clean_inline, row_text, show_links
from rag.reader.passages import BULLET, NAME_HEADING, Block, is_labelled_fact, read_blocks

_COMPLETE = re.compile(r"[.!?:;)\]\"'`*]$")
# What may follow a sentence's last mark: emoji (and their variation selectors and joiners),
# as in "...was added in FastAPI `0.102.0`. 🤓".
_TRAILING_SYMBOLS = frozenset({"So", "Sk", "Mn", "Cf", "Zs"})


def _complete(text: str) -> bool:
    """Whether the sentence ends as a sentence does, emoji after its mark aside."""
    end = len(text)
    while end and unicodedata.category(text[end - 1]) in _TRAILING_SYMBOLS:
        end -= 1
    return bool(_COMPLETE.search(text[:end]))


MIN_WORDS = 4
FACT_WORD = re.compile(r"\d|`[^`]+`")  # a number or a code word: a short sentence's fact


@dataclass(frozen=True)
class Sentence:
    """A quotable sentence (or item, or row) with its place and what follows it."""

    text: str
    first: int  # 0-based chunk lines
    last: int
    block: int  # index into the chunk's blocks
    ends_block: bool
    continues: bool = False  # "...the prefix must not include": it finishes what came before


def _prose_parts(block: Block) -> list[tuple[str, int, int]]:
    """(text as the page shows it, first line, last line) of each sentence of a prose
    block, split at sentence ends; lines are 0-based in the chunk."""
    starts: list[int] = []  # char offset where each line begins in the joined text
    joined = ""
    for line in block.lines:
        starts.append(len(joined))
        joined += line + " "
    pos = 0
    out: list[tuple[str, int, int]] = []
    for part in split_sentences(joined.strip()):
        at = joined.find(part, pos)
        pos = at + len(part)
        first = block.first + max(k for k, s in enumerate(starts) if s <= at)
        last = block.first + max(k for k, s in enumerate(starts) if s < pos)
        out.append((show_links(clean_inline(part.strip())), first, last))
    return out


def _unit_text(block: Block) -> str:
    """An item or a table row as one sentence, as the page shows it."""
    if block.kind == "row":
        return row_text(block.lines[0], block.header)
    return show_links(clean_inline(BULLET.sub("", block.lines[0]) + " "
                                   + " ".join(block.lines[1:])))


def sentences(blocks: Sequence[Block]) -> list[Sentence]:
    out: list[Sentence] = []
    for b_index, block in enumerate(blocks):
        if block.kind == "code":
            continue
        if block.kind != "prose":
            text = _unit_text(block)
            if len(text.split()) >= MIN_WORDS - 1 or is_labelled_fact(text):
                out.append(Sentence(text.strip(), block.first, block.last, b_index, True))
            continue
        # The first paragraph of a section named by an identifier ("### `port`", then "Dev
        # server listening port") describes that option, however short it is.
        describes = block.heading_line >= 0 and bool(NAME_HEADING.match(
            block.heading.rsplit(" > ", 1)[-1].strip())) and (
            b_index == 0 or blocks[b_index - 1].heading_line != block.heading_line)
        kept_previous = False  # whether the part before this one was kept
        opening: tuple[str, int] | None = None  # a short first sentence, and its first line
        parts = _prose_parts(block)
        for n, (text, first, last) in enumerate(parts):
            ends = n == len(parts) - 1
            if opening is not None:
                text, first = f"{opening[0]} {text}", opening[1]
                opening = None
            elif (n == 0 and not ends and len(text.split()) < MIN_WORDS and _complete(text)
                  and text[:1].isupper() and not leads_in(text)):
                # "Specify server port." opens an option's section: too short to quote
                # alone, it is quoted with the sentence after it.
                opening = (text, first)
                continue
            if (kept_previous and len(text.split()) < MIN_WORDS and FACT_WORD.search(text)
                    and _complete(text) and not text[:1].islower()):
                # "Default is `75`." is too short to quote alone, but it completes the
                # sentence before it: quote it with that one.
                prev = out[-1]
                out[-1] = Sentence(f"{prev.text} {text}", prev.first, last, b_index, ends)
                continue
            kept_previous = False
            # "...you write:" or "a new object would be created" opening a paragraph after a
            # code block finishes the sentence that introduced the block: quotable as the
            # rest of that quote, never as a quote's start; with another code block after
            # it ("will render as"), it may end without a stop.
            continues = n == 0 and (text.startswith(("...", "…")) or text[:1].islower()
                                    and b_index > 0 and blocks[b_index - 1].kind == "code")
            # A short one ("...you write:") is kept only for the code it introduces.
            shows_code = b_index + 1 < len(blocks) and blocks[b_index + 1].kind == "code"
            # "To install `ruff`:" or "Valid values include:" is short, but the code or list
            # it brings is the answer ("For example:" or "JSON:" says too little to stand for
            # the code after it).
            brings = blocks[b_index + 1].kind if ends and b_index + 1 < len(blocks) else ""
            names_it = bool(FACT_WORD.search(text))  # a code word or number
            lead = leads_in(text) and (
                (brings == "code" and names_it)
                or (brings == "item" and (names_it or len(text.split()) >= MIN_WORDS - 1)))
            # So is a short label over code that is no lead ("Or, a branch:", "`netstat`
            # (Linux)"): quoted in the quote it sits in, so the blocks it tells apart stay so.
            continues = continues or (n == 0 and ends and shows_code and not lead
                                      and len(text.split()) < MIN_WORDS)
            # "**Default**: `None`" alone in its paragraph states a value, as the item would.
            # "HTTPX requires Python 3.9+": a paragraph of its own that states a fact (a
            # number or a code word) is a statement, with or without its final stop.
            labelled = ends and n == 0 and (is_labelled_fact(text) or text[:1].isupper() and (
                describes and len(text.split()) >= 2
                or len(text.split()) >= MIN_WORDS and bool(FACT_WORD.search(text))))
            # "leaf bundle" then ": A leaf bundle is...": a term opens its entry's first
            # sentence, lowercase or not.
            term = n == 0 and len(block.lines) > 1 and block.lines[1].startswith(": ")
            if not labelled and (
                    len(text.split()) < (2 if continues and shows_code or lead else MIN_WORDS)
                    or not (_complete(text) or continues and shows_code)
                    or (text[:1].islower() or text.startswith(("...", "…")))
                    and not (continues or term)):
                continue  # a fragment, or a sentence cut short
            out.append(Sentence(text, first, last, b_index, ends, continues))
            kept_previous = True
    return out


@dataclass(frozen=True)
class Unit:
    """One thing a text states: a sentence of a paragraph, an item, a table row, or a code
    block (kind "code"), as the page shows it; lines are 0-based."""

    text: str
    first: int
    last: int
    kind: str


def units(text: str, *, whole_file: bool = False) -> list[Unit]:
    """Every sentence of every paragraph (split where :func:`sentences` splits), every item,
    table row and code block of Markdown, in order; none is dropped as unquotable, however
    short. Headings and markup are no unit; with ``whole_file``, neither is front matter."""
    out: list[Unit] = []
    for block in read_blocks(text, first_line_is_file_start=whole_file):
        if block.kind == "code":
            out.append(Unit("\n".join(block.lines), block.first, block.last, "code"))
        elif block.kind != "prose":
            out.append(Unit(_unit_text(block).strip(), block.first, block.last, block.kind))
        else:
            out.extend(Unit(said.strip(), first, last, "prose")
                       for said, first, last in _prose_parts(block) if said.strip())
    return out


def claim_sentences(text: str) -> list[Unit]:
    """The sentences a whole Markdown text states, to check it against the docs: its units
    without code, and without a lead-in ("Run:") that only introduces what follows it."""
    return [u for u in units(text, whole_file=True)
            if u.kind != "code" and u.text and not leads_in(u.text)]
