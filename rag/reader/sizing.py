"""Chunk sizes: pack a section's lines into pieces under ``max_tokens``, merge small ones.

Used by :mod:`rag.reader.chunking`. A section over the budget is split on blank lines outside
code fences, then on line boundaries, and a single line over the budget into pieces of
that line (:func:`rag.reader.sentences.split_line`), which carry column offsets. Pieces never
start or end with a line that has no content (blank, a comment, a link definition, pure
markup: see ``content`` below), so no chunk is made only of those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from rag.core.text import leads_in
from rag.reader.sentences import split_line

MAX_CHARS_PER_TOKEN = 8  # MiniLM word-pieces in real docs: 3 chars on average, 6.4 at most


class Span(NamedTuple):
    """Lines ``start..end`` (0-based, inclusive), their token count, and for a piece of
    one line its ``(start, end)`` columns in that line (None for whole lines)."""

    start: int
    end: int
    tokens: int
    cols: tuple[int, int] | None = None


class Unit(NamedTuple):
    span: Span
    paths: tuple[tuple[str, ...], ...]  # heading path of each section merged into it


def trim(content: list[bool], start: int, end: int) -> tuple[int, int] | None:
    """Shrink lines ``start..end`` past edge lines without content; None if none has any."""
    while start <= end and not content[start]:
        start += 1
    while end >= start and not content[end]:
        end -= 1
    return (start, end) if start <= end else None


class Sizer:
    """Counts tokens of line ranges and packs ranges into pieces under ``max_tokens``.

    Packing adds up per-block counts (each less the counter's cost of an empty string,
    e.g. special tokens) and checks every packed piece with one real count, so the real
    counter is called on whole paragraphs and pieces, never per character.
    ``content[i]`` tells whether line ``i`` shows any text to a reader.
    """

    def __init__(
        self, lines: list[str], content: list[bool], count: Callable[[str], int],
        max_tokens: int, breaks: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        self.lines = lines
        self.content = content
        self.breaks = breaks or {}  # line -> columns where a section starts inside it
        self._count = count
        self.max_tokens = max_tokens
        self.overhead = count("")

    def count(self, start: int, end: int) -> int:
        return self._count("\n".join(self.lines[start : end + 1]))

    def count_if_plausible(self, start: int, end: int) -> int | None:
        """Tokens of a range, or None when it is far too long to fit.

        Counting sections that get split anyway cost most of the time on real docs; a
        wrong guess costs only time, as split() counts every piece it makes."""
        size = sum(len(self.lines[i]) + 1 for i in range(start, end + 1))
        if size > MAX_CHARS_PER_TOKEN * self.max_tokens:
            return None
        return self.count(start, end)

    def fits(self, start: int, end: int) -> int | None:
        """Tokens of lines ``start..end`` when they fit in one piece and no section starts
        inside one of them, else None."""
        if any(start <= i <= end for i in self.breaks):
            return None
        tokens = self.count_if_plausible(start, end)
        return tokens if tokens is not None and tokens <= self.max_tokens else None

    def split(self, first: int, last: int, fenced: list[bool]) -> list[Span]:
        """Pieces of a too-long section: paragraphs, then lines, then pieces of a line."""
        items: list[Span] = []
        for start, end in self._paragraphs(first, last, fenced):
            tokens = self.fits(start, end)
            if tokens is not None:
                items.append(Span(start, end, tokens))
                continue
            for i in range(start, end + 1):
                if self.content[i]:  # lines without content are only spanned, never alone
                    items.extend(self._line(i))
        return self._pack(items)

    def _line(self, i: int) -> list[Span]:
        line = self.lines[i]
        tokens = self.fits(i, i)
        if tokens is not None:
            return [Span(i, i, tokens)]
        pieces = split_line(line, self._count, self.max_tokens, self.breaks.get(i, ()))
        if len(pieces) == 1 and pieces[0][:2] == (0, len(line)):
            return [Span(i, i, pieces[0][2])]
        return [Span(i, i, tokens, (start, end)) for start, end, tokens in pieces]

    def _paragraphs(self, start: int, end: int, fenced: list[bool]) -> list[tuple[int, int]]:
        """Runs of lines between blank lines that are not inside a code fence; in a block
        quote, a line of only its markers (">") is blank too: an aside of many paragraphs
        splits between them, not line by line."""
        out: list[tuple[int, int]] = []
        run_start: int | None = None
        for i in range(start, end + 1):
            if not fenced[i] and not self.lines[i].strip().replace(">", "").strip():
                if run_start is not None:
                    out.append((run_start, i - 1))
                run_start = None
            elif run_start is None:
                run_start = i
        if run_start is not None:
            out.append((run_start, end))
        # A fence left open at the end of the file can end in blank lines.
        return [span for s, e in out if (span := trim(self.content, s, e))]

    def _pack(self, items: list[Span]) -> list[Span]:
        groups: list[list[Span]] = []
        total = 0
        for item in items:
            cost = item.tokens - self.overhead
            partial = item.cols is not None or (groups and groups[-1][-1].cols is not None)
            if groups and not partial:
                cost += self._gap(groups[-1][-1].end, item.start)
            if groups and not partial and total + cost <= self.max_tokens:
                groups[-1].append(item)
                total += cost
            elif (moved := self._lead_in(groups, item, cost)) is not None:
                groups.append([moved, item])  # a lead-in stays with what it introduces
                total = moved.tokens + cost
            else:
                groups.append([item])
                total = self.overhead + cost
        pieces: list[Span] = []
        for group in groups:
            alone = len(group) == 1
            tokens = group[0].tokens if alone else self.count(group[0].start, group[-1].end)
            if tokens <= self.max_tokens or alone:
                pieces.append(group[0] if alone else Span(group[0].start, group[-1].end, tokens))
            else:  # the counter is not additive here (tokens across line breaks)
                pieces.extend(self._pack_exact(group))
        return pieces

    def _lead_in(self, groups: list[list[Span]], item: Span, cost: int) -> Span | None:
        """The last item of the piece so far, taken off it, when it is a paragraph ending in
        ":" (a lead-in: "...can be set to `'json'`:") and fits in one piece with the code
        block or list it introduces; None otherwise."""
        if not groups or len(groups[-1]) < 2 or item.cols is not None:
            return None
        last = groups[-1][-1]
        if last.cols is not None or not leads_in(self.lines[last.end]) \
                or last.tokens + cost > self.max_tokens:  # cost holds the gap between them
            return None
        return groups[-1].pop()

    def _gap(self, after: int, before: int) -> int:
        """Tokens of the lines between two items (comments, includes... that a piece
        joining the items spans), so the estimate of the joined piece stays close."""
        if not any(self.lines[i].strip() for i in range(after + 1, before)):
            return 0
        return max(0, self.count(after + 1, before - 1) - self.overhead)

    def _pack_exact(self, items: list[Span]) -> list[Span]:
        pieces: list[Span] = []
        current = items[0]
        for item in items[1:]:
            tokens = self.count(current.start, item.end)
            if tokens <= self.max_tokens:
                current = Span(current.start, item.end, tokens)
            else:
                pieces.append(current)
                current = item
        pieces.append(current)
        return pieces


def merge_small(units: list[Unit], sizer: Sizer, min_tokens: int) -> list[Unit]:
    """Merge each unit under ``min_tokens`` into the next one when the result fits.

    Pieces of one line (with columns) never merge: their text is not whole lines.
    Neither do units whose heading paths share no root.
    """
    out: list[Unit] = []
    carry: Unit | None = None
    for unit in units:
        if carry is not None:
            paths = carry.paths + unit.paths
            # Sections under different roots (two H1s) stay apart: merged, they would
            # have no heading path in common.
            fits = unit.span.cols is None and (heading_path(paths) or not any(paths))
            tokens = sizer.count(carry.span.start, unit.span.end) if fits else None
            if tokens is not None and tokens <= sizer.max_tokens:
                unit = Unit(Span(carry.span.start, unit.span.end, tokens), paths)
            else:
                out.append(carry)
            carry = None
        if unit.span.tokens < min_tokens and unit.span.cols is None:
            carry = unit
        else:
            out.append(unit)
    if carry is not None:
        out.append(carry)
    return out


def heading_path(paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """The deepest path that each given path lies under or is an ancestor of."""
    candidates = {path[:n] for path in paths for n in range(len(path) + 1)}
    return max(
        (c for c in candidates if all(p[: len(c)] == c or c[: len(p)] == p for p in paths)),
        key=len,
    )
