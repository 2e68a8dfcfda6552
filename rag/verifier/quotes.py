"""Finding a statement's quote in the evidence it cites, word for word.

A model backs each statement with a short verbatim quote. Code, not the model, decides
whether the quote is there: both sides are read as :func:`rag.core.text.tokens` (case,
whitespace, line wraps, punctuation and Markdown emphasis or code marks fall away; an
inline link reads as its text), and the quote's words must occur in the evidence as one
unbroken run, in order. A changed, added or dropped word is not the quote. Several pieces
may be joined by an ellipsis ("... "), each found on its own. The lines a quote covers are
the statement's line-precise citation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rag.core.records import Chunk
from rag.core.text import content_words, tokens
from rag.reader.inline import clean_inline, show_links

# "first part ... second part": a quote may skip what lies between two pieces.
_ELLIPSIS = re.compile(r"\.{3}|\u2026")
# A piece of fewer words than this matches too much of any text to back a claim.
MIN_PIECE_WORDS = 2
MIN_QUOTE_CONTENT_WORDS = 2


def quote_words(text: str) -> list[str]:
    """The words a quote is matched by: the text as the page shows it (links as their text,
    entities as characters), tokenised, without the underscores of ``_emphasis_``."""
    return [w for t in tokens(show_links(clean_inline(text))) if (w := t.strip("_"))]


def quote_pieces(quote: str) -> list[str]:
    """The pieces of a quote, split at ellipses; blank pieces dropped."""
    return [p.strip() for p in _ELLIPSIS.split(quote.strip()) if quote_words(p)]


def well_formed(quote: str) -> bool:
    """Whether a quote is long enough to back anything: every piece of two words or more,
    and at least two content words in all."""
    pieces = quote_pieces(quote)
    return bool(pieces) and all(len(quote_words(p)) >= MIN_PIECE_WORDS for p in pieces) \
        and len(content_words(quote)) >= MIN_QUOTE_CONTENT_WORDS


def _chunk_words(chunk: Chunk) -> tuple[list[str], list[int]]:
    """The chunk's words and the file line each stands on (-1 when the chunk's text does
    not fill its line range, as for a piece of one long line: then lines are unknown)."""
    lines = chunk.text.split("\n")
    exact = len(lines) == chunk.end_line - chunk.start_line + 1
    found: list[str] = []
    at: list[int] = []
    for n, line in enumerate(lines):
        for word in quote_words(line):
            found.append(word)
            at.append(chunk.start_line + n if exact else -1)
    return found, at


def _find_run(needle: Sequence[str], hay: Sequence[str]) -> int:
    """Index where ``needle`` starts as an unbroken run in ``hay``, or -1."""
    first, size = needle[0], len(needle)
    for i in range(len(hay) - size + 1):
        if hay[i] == first and list(hay[i:i + size]) == list(needle):
            return i
    return -1


@dataclass(frozen=True)
class Found:
    """Where one quote piece stands: the chunk's index among the cited ones, and its file
    lines (None when the chunk cannot say which lines)."""

    chunk: int
    lines: tuple[int, int] | None


def find_piece(piece: str, chunks: Sequence[Chunk]) -> Found | None:
    """The first cited chunk holding ``piece`` word for word, and its lines there."""
    needle = quote_words(piece)
    if not needle:
        return None
    for n, chunk in enumerate(chunks):
        hay, at = _chunk_words(chunk)
        start = _find_run(needle, hay)
        if start < 0:
            continue
        first, last = at[start], at[start + len(needle) - 1]
        return Found(n, (first, last) if first > 0 else None)
    return None


def find_quote(quote: str, chunks: Sequence[Chunk]) -> list[Found] | str:
    """Each piece of ``quote`` found in ``chunks``, or why the quote does not back anything."""
    if not quote.strip():
        return "it gives no quote from the evidence"
    if not well_formed(quote):
        return f"its quote {_short(quote)} is too short to back a statement"
    out: list[Found] = []
    for piece in quote_pieces(quote):
        found = find_piece(piece, chunks)
        if found is None:
            return f"its quote {_short(piece)} is not in the cited evidence"
        out.append(found)
    return out


def _short(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= 60 else text[:57] + "...")
