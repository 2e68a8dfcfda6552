"""Verifier: map the model's labels back to real places, and check statements against them.

The model only ever writes labels (``E2``). Here, in code, each label must equal exactly
one label that was shown; it is then mapped to the path, lines, chunk id and heading of
that Evidence. Whether a statement is supported is a deterministic word-overlap score,
so the same answer always verifies the same way.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rag.core.errors import CitationError
from rag.core.records import Chunk, Citation, Evidence, Statement
from rag.core.text import content_words, normalise, parts, words

_LABEL_SHAPE = re.compile(r"E([1-9][0-9]*)")


def _describe_labels(evidence: Sequence[Evidence]) -> str:
    """'E1-E4' for the usual contiguous labels, else a comma list ('none' when empty)."""
    labels = [ev.label for ev in evidence]
    if not labels:
        return "none"
    numbers = [int(m.group(1)) if (m := _LABEL_SHAPE.fullmatch(lb)) else -1 for lb in labels]
    if len(labels) > 1 and numbers == list(range(1, len(labels) + 1)):
        return f"{labels[0]}-{labels[-1]}"
    return ", ".join(labels)


def _quote(label: object) -> str:
    text = repr(label)  # repr keeps the message on one line whatever the model sent
    return text if len(text) <= 40 else text[:37] + "..."


def verify_citations(
    labels: Sequence[str],
    evidence: Sequence[Evidence],
    *,
    allowed_groups: frozenset[str] | None = None,
) -> list[Citation]:
    """Map each label to a Citation; any label that was not shown raises CitationError.

    Matching is exact: ``e2``, `` E2``, ``E02`` are not ``E2``. Repeated labels collapse
    to one citation, first occurrence first. With ``allowed_groups`` (None = no check) a
    label whose chunk is restricted to other groups raises too, so a citation the user
    may not see can never reach them.
    """
    by_label = {ev.label: ev for ev in evidence}
    citations: list[Citation] = []
    done: set[str] = set()
    for label in labels:
        ev = by_label.get(label) if isinstance(label, str) else None
        if ev is None:
            raise CitationError(
                f"unknown evidence label {_quote(label)} (shown: {_describe_labels(evidence)})"
            )
        if label in done:
            continue
        done.add(label)
        chunk = ev.chunk
        if allowed_groups is not None and chunk.visibility and allowed_groups.isdisjoint(
            chunk.visibility
        ):
            # The path is not named: the user is not allowed to learn it.
            raise CitationError(f"evidence label {_quote(label)} points to a source you may not see")
        citations.append(
            Citation(
                label=label,
                source_path=chunk.source_path,
                chunk_id=chunk.chunk_id,
                start_line=chunk.start_line,
                end_line=chunk.end_line,
                heading=chunk.heading,
            )
        )
    return citations


# A one-word "statement" ("Rag.") states nothing checkable, however often it is cited.
MIN_CONTENT_WORDS = 2


def _vocabulary(cited: Sequence[Evidence]) -> set[str]:
    vocab: set[str] = set()
    for ev in cited:
        for word in words(f"{ev.chunk.heading or ''}\n{ev.chunk.text}"):
            vocab.add(word)
            vocab.update(normalise(p) for p in parts(word))
    return vocab


def _found(word: str, vocab: set[str]) -> bool:
    if word in vocab:
        return True
    # "fastapi-cli" in a statement, "fastapi cli" in the docs: all parts present counts.
    pieces = [normalise(p) for p in parts(word)]
    return len(pieces) > 1 and all(p in vocab for p in pieces)


def support_score(statement: str, cited: Sequence[Evidence]) -> float:
    """Share of the statement's content words that occur in the cited evidence.

    Content words are lowercased words minus stopwords, plurals folded (``ports`` ->
    ``port``), numbers and code identifiers kept whole. The evidence side includes
    headings. 0.0 when nothing is cited or the statement has no content words.
    """
    claimed = content_words(statement)
    if not cited or not claimed:
        return 0.0
    vocab = _vocabulary(cited)
    return sum(_found(w, vocab) for w in claimed) / len(claimed)


def _chunk_lines(chunk: Chunk) -> list[str] | None:
    """The chunk's text as its lines, or None when they do not fill its line range."""
    lines = chunk.text.split("\n")
    return lines if len(lines) == chunk.end_line - chunk.start_line + 1 else None


def cited_text(chunk: Chunk, start: int, end: int) -> str:
    """The indexed text of lines start..end of a chunk (what the file must still hold)."""
    lines = _chunk_lines(chunk)
    if lines is None or (start, end) == (chunk.start_line, chunk.end_line):
        return chunk.text
    return "\n".join(lines[start - chunk.start_line:end - chunk.start_line + 1])


_SPACE = re.compile(r"\s+")


def locate_quote(text: str, chunk: Chunk) -> tuple[int, int] | None:
    """File lines of a statement the chunk holds verbatim (whitespace aside), found once."""
    lines = _chunk_lines(chunk)
    needle = _SPACE.sub(" ", text).strip()
    if lines is None or len(needle.split()) < MIN_CONTENT_WORDS:
        return None
    flat, starts = "", []
    for line in lines:
        starts.append(len(flat))
        flat += _SPACE.sub(" ", line).strip() + " "
    at = flat.find(needle)
    if at < 0 or flat.find(needle, at + 1) >= 0:
        return None
    end = at + len(needle) - 1
    first = max(i for i, s in enumerate(starts) if s <= at)
    last = max(i for i, s in enumerate(starts) if s <= end)
    return chunk.start_line + first, chunk.start_line + last


def narrow(citation: Citation, chunk: Chunk, lines: tuple[int, int] | None) -> Citation:
    """The citation cut to the quoted lines when they lie inside its chunk, else as it is."""
    if lines is None or _chunk_lines(chunk) is None:
        return citation
    start, end = lines
    if not chunk.start_line <= start <= end <= chunk.end_line:
        return citation
    return replace(citation, start_line=start, end_line=end)


# What a small model writes once it has lost the thread, which the word-overlap score alone
# would pass: markup echoed back ("</untrusted-source", "{#"), a short run repeated ("1: 1:
# 1:", "}]}]}]", ",#,#,#"), words run together by commas ("app,client,client-side,s"),
# punctuation piled up (",." "*,"), or a sentence cut short ("...and the."). (The same
# words repeated is no sign: docs repeat "the data sent by the client" in one sentence.)
_ECHO = re.compile(r"(?i)</\w|untrusted-|<unused|\{#")
_RUN = re.compile(r"(.{2,8}?)\1{2,}|([^\w\s])\2{3,}")
_JAMMED = re.compile(r"[A-Za-z],[A-Za-z]|[,;][,.;*#]")
_CUT_SHORT = re.compile(r"(?i)\b(?:the|a|an|and|or)[.,]?$")


def garbled(text: str) -> bool:
    """Whether a statement a model wrote (not a verbatim quote) reads as degenerate output
    rather than a sentence; see above. Code spans are not read."""
    spans = itertools.count()
    prose = re.sub(r"`[^`]*`", lambda _: f"code{next(spans)}", text).strip()
    if _ECHO.search(prose) or _JAMMED.search(prose) or _CUT_SHORT.search(prose):
        return True
    return any(not (run.group(1) or run.group(2)).strip().isalnum()
               for run in _RUN.finditer(prose))


def missing_words(text: str, cited: Sequence[Evidence]) -> list[str]:
    """The content words of ``text`` that none of the cited evidence holds (see
    support_score), in a stable order."""
    vocab = _vocabulary(cited)
    return sorted(w for w in content_words(text) if not _found(w, vocab))


def check_support(
    statements: Sequence[tuple[str, Sequence[str]]],
    evidence: Sequence[Evidence],
    *,
    threshold: float,
    allowed_groups: frozenset[str] | None = None,
    quotes: Sequence[tuple[int, int] | None] = (),
) -> list[Statement]:
    """Verify every statement's labels and score it against exactly the evidence it cites.

    A statement is supported when it cites something, its score reaches ``threshold``, and,
    unless it quotes the evidence verbatim, it is not :func:`garbled`.
    Unknown or forbidden labels raise CitationError (see verify_citations). A statement
    citing one label is cited line-precisely: at the lines it quotes (``quotes``, given by
    the generator, checked to lie inside the chunk), or where the chunk holds it verbatim.
    """
    by_label = {ev.label: ev for ev in evidence}
    out: list[Statement] = []
    for n, (text, labels) in enumerate(statements):
        citations = verify_citations(labels, evidence, allowed_groups=allowed_groups)
        score = support_score(text, [by_label[c.label] for c in citations])
        lines = quotes[n] if n < len(quotes) else None
        if len(citations) == 1:
            chunk = by_label[citations[0].label].chunk
            lines = lines or locate_quote(text, chunk)
            citations = [narrow(citations[0], chunk, lines)]
        out.append(
            Statement(
                text=text,
                citations=tuple(citations),
                supported=bool(citations) and score >= threshold
                and len(content_words(text)) >= MIN_CONTENT_WORDS
                and (lines is not None or not garbled(text)),
                support_score=score,
            )
        )
    return out


def quote_lines(
    docs_root: Path, source_path: str, start: int, end: int, expected: str,
    cache: dict[str, list[str] | None] | None = None,
    *, cols: tuple[int | None, int | None] = (None, None),
) -> tuple[list[tuple[int, str]], str | None]:
    """(numbered lines, None), or ([], why) when the file no longer holds the indexed text.

    Citations are checked against the index; this second check against the file itself
    means a stale index can never make anyone quote lines that are not there. ``cols``
    are the chunk's ``(start_col, end_col)``: for a piece of one long line, the piece is
    checked and quoted, not the whole line.
    """
    from rag.reader.chunking import span_text
    from rag.reader.docfiles import source_lines

    cache = {} if cache is None else cache
    if source_path not in cache:
        cache[source_path] = source_lines(docs_root, source_path)
    lines = cache[source_path]
    if lines is None:
        return [], f"{source_path} can no longer be read from the docs folder; re-index"
    if start < 1 or end > len(lines) or span_text(lines, start, end, *cols) != expected:
        return [], f"{source_path} has changed since it was indexed; re-index to see the lines"
    return list(enumerate(expected.split("\n"), start=start)), None
