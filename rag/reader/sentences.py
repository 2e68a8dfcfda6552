"""Split one line that is too long for the encoder into pieces at sentence boundaries.

Docs written one paragraph per line give lines of thousands of word-pieces; the encoder
reads the first 256 and drops the rest. :func:`split_line` cuts such a line into pieces
that each fit ``max_tokens``: after a sentence end (the one rule,
:data:`rag.core.text.SENTENCE_END`) where it can, else at a space, else anywhere (a single
"word" over the budget).
Pieces never start or end with blanks and never overlap; what lies between them is
only whitespace. Positions are ``str`` indexes (code points) in the line.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

from rag.core.text import SENTENCE_END

_FIRST_WINDOW_CHARS_PER_TOKEN = 4  # real docs: about 3 characters per MiniLM word-piece


def split_line(
    line: str, count: Callable[[str], int], max_tokens: int, breaks: Sequence[int] = (),
) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` of each piece: ``line[start:end]`` has ``tokens`` <= max.
    No piece runs across a column of ``breaks`` (sorted: where a heading of a minified
    page starts a section inside the line).

    The counter is called on sentences and on packed pieces, never per character, so a
    line of megabytes costs a few counts per piece.
    """
    units: list[tuple[int, int, int]] = []
    for start, end in _cut(_sentences(line), line, breaks):
        if end - start > _FIRST_WINDOW_CHARS_PER_TOKEN * 2 * max_tokens:
            units.extend(_windows(line, start, end, count, max_tokens))
            continue
        tokens = count(line[start:end])
        if tokens <= max_tokens:
            units.append((start, end, tokens))
        else:
            units.extend(_windows(line, start, end, count, max_tokens))
    return _pack(line, units, count, max_tokens, breaks)


def _cut(spans: list[tuple[int, int]], line: str, breaks: Sequence[int],
         ) -> list[tuple[int, int]]:
    """The spans, each cut at the break columns inside it (blanks stripped)."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        for column in breaks[bisect_right(breaks, start):bisect_left(breaks, end)]:
            if (span := _strip(line, start, column)) is not None:
                out.append(span)
            start = column
        if (span := _strip(line, start, end)) is not None:
            out.append(span)
    return out


def _between(breaks: Sequence[int], after: int, before: int) -> bool:
    """Whether a break column lies in ``after..before`` (``breaks`` sorted)."""
    at = bisect_left(breaks, after)
    return at < len(breaks) and breaks[at] <= before


def _sentences(line: str) -> list[tuple[int, int]]:
    """Non-blank ``(start, end)`` ranges of the line's sentences, blanks left out."""
    out: list[tuple[int, int]] = []
    pos = 0
    for match in SENTENCE_END.finditer(line):  # a match is the white space between two
        out.append((pos, match.start()))
        pos = match.end()
    out.append((pos, len(line)))
    return [span for s, e in out if (span := _strip(line, s, e))]


def _strip(line: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and line[start] in " \t":
        start += 1
    while end > start and line[end - 1] in " \t":
        end -= 1
    return (start, end) if start < end else None


def _windows(
    line: str, start: int, end: int, count: Callable[[str], int], max_tokens: int
) -> list[tuple[int, int, int]]:
    """Pieces of one over-long sentence, cut at the last space that keeps them in budget."""
    out: list[tuple[int, int, int]] = []
    width = _FIRST_WINDOW_CHARS_PER_TOKEN * max_tokens
    pos = start
    while (span := _strip(line, pos, end)) is not None:
        pos = span[0]
        while True:
            stop = min(end, pos + width)
            cut = stop
            if stop < end:
                space = max(line.rfind(" ", pos, stop), line.rfind("\t", pos, stop))
                cut = space if space > pos else stop
            piece_end = _strip(line, pos, cut)[1]  # type: ignore[index] # line[pos] is not blank
            tokens = count(line[pos:piece_end])
            if tokens <= max_tokens or piece_end - pos <= 1:
                break
            width = max(1, min(width - 1, (piece_end - pos) * max_tokens // tokens))
        out.append((pos, piece_end, tokens))
        pos = cut
        width += max(1, width // 4)  # the next piece may fit more: grow the window again
    return out


def _pack(
    line: str, units: list[tuple[int, int, int]], count: Callable[[str], int], max_tokens: int,
    breaks: Sequence[int] = (),
) -> list[tuple[int, int, int]]:
    """Join consecutive units while the joined text still fits (checked by a real count)
    and no break column lies between them."""
    pieces: list[tuple[int, int, int]] = []
    overhead = count("")
    for unit in units:
        if pieces and not _between(breaks, pieces[-1][1], unit[0]):
            start, _, tokens = pieces[-1]
            if tokens + unit[2] - overhead <= max_tokens:
                joined = count(line[start:unit[1]])
                if joined <= max_tokens:
                    pieces[-1] = (start, unit[1], joined)
                    continue
        pieces.append(unit)
    return pieces
