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
from functools import lru_cache
from pathlib import Path
from typing import Any

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
    return set().union(*(_chunk_vocabulary(ev.chunk) for ev in cited))


@lru_cache(maxsize=4096)
def _chunk_vocabulary(chunk: Chunk) -> frozenset[str]:
    """A chunk's words and their parts, heading included (read once per chunk)."""
    vocab: set[str] = set()
    for word in words(f"{chunk.heading or ''}\n{chunk.text}"):
        vocab.add(word)
        vocab.update(normalise(p) for p in parts(word))
    return frozenset(vocab)


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
    quoted: Sequence[str] = (),
) -> list[Statement]:
    """Verify every statement's labels, find its quote, and check it against both.

    ``quoted`` holds each statement's quote (see rag.verifier.quotes); a statement without
    one is its own quote, so it must stand in the evidence verbatim. ``quotes`` are the file
    lines a quoting generator took a statement from (it knows them; they are checked to lie
    inside the chunk). A statement is supported when it cites something, its quote is found
    there (or its lines are known), its score reaches ``threshold``, and, unless it is a
    verbatim quote, it is not :func:`garbled`, it agrees with its quote on numbers,
    versions, identifiers, negation and names (rag.verifier.consistency), and the lines it
    quotes hold ``threshold`` of its content words; ``reason`` says why when it is not.
    Unknown or forbidden labels raise CitationError (see verify_citations). Each citation
    is cut to the lines its quote covers.
    """
    by_label = {ev.label: ev for ev in evidence}
    out: list[Statement] = []
    for n, (text, labels) in enumerate(statements):
        citations = verify_citations(labels, evidence, allowed_groups=allowed_groups)
        cited = [by_label[c.label] for c in citations]
        score = support_score(text, cited)
        quote = (quoted[n] if n < len(quoted) else "").strip() or text
        hint = quotes[n] if n < len(quotes) else None
        located = _locate(quote, hint, cited)
        if not isinstance(located, str):
            citations = [narrow(c, ev.chunk, located.get(i))
                         for i, (c, ev) in enumerate(zip(citations, cited, strict=True))]
        reason = _refusal(text, quote, cited, score, threshold, located)
        out.append(Statement(text=text, citations=tuple(citations), supported=not reason,
                             support_score=score, quote=quote, reason=reason))
    return out


def _locate(quote: str, hint: tuple[int, int] | None,
            cited: Sequence[Evidence]) -> dict[int, tuple[int, int]] | str:
    """The lines the quote covers in each cited chunk (by position), or why it is not there.

    Lines a quoting generator took the statement from (code knows them; a model cannot
    give them) stand for its single citation; :func:`narrow` keeps them only inside it."""
    from rag.verifier.quotes import find_quote

    if hint is not None and len(cited) == 1:
        return {0: hint}
    if not cited:
        return "it cites no evidence"
    found = find_quote(quote, [ev.chunk for ev in cited])
    if isinstance(found, str):
        return found
    spans: dict[int, tuple[int, int]] = {}
    for piece in found:
        if piece.lines is None:
            continue
        start, end = spans.get(piece.chunk, piece.lines)
        spans[piece.chunk] = (min(start, piece.lines[0]), max(end, piece.lines[1]))
    return spans


def _with_term(chunk: Chunk, start: int, end: int) -> tuple[int, int]:
    """Lines start..end, from the term of the definition-list entry they stand in, if any
    ("`buildDrafts`" above ": Whether to include draft content"): the term names what the
    quoted lines describe."""
    from rag.reader.passages import read_blocks

    if _chunk_lines(chunk) is None:
        return start, end
    for block in read_blocks(chunk.text):
        first, last = chunk.start_line + block.first, chunk.start_line + block.last
        if block.group >= 0 and first <= start <= last:
            return min(start, chunk.start_line + block.group), end
    return start, end


def _refusal(text: str, quote: str, cited: Sequence[Evidence], score: float, threshold: float,
             located: dict[int, tuple[int, int]] | str) -> str:
    """Why the statement is not supported, or "" when it is."""
    if not cited:
        return "it cites no evidence"
    if len(content_words(text)) < MIN_CONTENT_WORDS:
        return "it states nothing that can be checked"
    if score < threshold:
        return (f"only {score:.0%} of its words are in the cited evidence "
                f"(verification.support_threshold is {threshold:.0%})")
    if isinstance(located, str):
        return located
    if quote != text and garbled(text):
        return "it reads as garbled output, not a sentence"
    if quote == text:
        return ""  # verbatim: it says exactly what the evidence says
    from rag.verifier.consistency import inconsistency

    evidence_text = "\n".join(f"{ev.chunk.source_path}\n{ev.chunk.heading or ''}\n{ev.chunk.text}"
                              for ev in cited)
    # The lines the quote stands on, with their heading; a chunk that cannot say which of
    # its lines a quote covers (a piece of one long line) counts whole.
    passages = [f"{ev.chunk.heading or ''}\n" + (
        cited_text(ev.chunk, *_with_term(ev.chunk, *located[i])) if i in located
        else ev.chunk.text)
        for i, ev in enumerate(cited) if i in located or _chunk_lines(ev.chunk) is None]
    why = inconsistency(text, quote, evidence_text, "\n".join(passages))
    if why:
        return why
    share = word_share(text, passages or [quote])
    if share < threshold:
        return (f"only {share:.0%} of its words are in the lines it quotes "
                f"(verification.support_threshold is {threshold:.0%})")
    if part := unbacked_clause(text, passages or [quote]):
        return f"the lines it quotes do not say {part!r}"
    return ""


# Where a sentence joins one claim to another: a comma, semicolon or colon, or a word that
# starts a clause ("..., which are cached", "... and reloads it", "... since it ...").
_CLAUSE = re.compile(r"[,;:]\s+|(?<!\s)\s+(?:and|but|which|while|whereas|since|because|so that|"
                     r"although|though|then)\s+", re.IGNORECASE)
MIN_CLAUSE_WORDS = 2
# A clause a passage backs keeps about a third of its words there, however it is
# paraphrased; a claim added to a backed one shares hardly any.
CLAUSE_SHARE = 0.3


def clauses(text: str) -> list[str]:
    """The parts of a sentence that each state something: split where a clause starts,
    a part of fewer than MIN_CLAUSE_WORDS content words joined to the one before it."""
    out: list[str] = []
    for part in _CLAUSE.split(text):
        if out and len(content_words(part)) < MIN_CLAUSE_WORDS:
            out[-1] = f"{out[-1]} {part}"
        elif part.strip():
            out.append(part)
    if len(out) > 1 and len(content_words(out[0])) < MIN_CLAUSE_WORDS:
        first = out.pop(0)
        out[0] = f"{first} {out[0]}"
    return out


def unbacked_clause(text: str, passages: Sequence[str],
                    threshold: float = CLAUSE_SHARE) -> str | None:
    """The first clause of ``text`` of which the passages hold less than ``threshold`` of
    the content words (a claim added to a backed one), or None; a sentence of one clause
    is the support score's to judge."""
    parts = clauses(text)
    if len(parts) < 2:
        return None
    for part in parts:
        if word_share(part, passages) < threshold:
            return part.strip()
    return None


def word_share(text: str, passages: Sequence[str]) -> float:
    """Share of the text's content words found in the passages (as support_score counts)."""
    claimed = content_words(text)
    vocab: set[str] = set()
    for passage in passages:
        for word in words(passage):
            vocab.add(word)
            vocab.update(normalise(p) for p in parts(word))
    return sum(_found(w, vocab) for w in claimed) / len(claimed) if claimed else 0.0


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


def cell_fields(docs_root: Path, chunk: Chunk, start: int, end: int,
                cache: dict[str, list[str] | None]) -> dict[str, Any]:
    """For JSON: where cited lines of a notebook sit as the notebook shows them, ``cell``
    and ``cell_lines`` (and ``end_cell``: rag.reader.formats.cell_place), once the file is
    found to still hold them (see :func:`quote_lines`); {} for a chunk of any other file."""
    from rag.reader.formats import cell_place, reader_of

    if reader_of(chunk).name != "notebook":
        return {}
    _, note = quote_lines(docs_root, chunk.source_path, start, end,
                          cited_text(chunk, start, end), cache,
                          cols=(chunk.start_col, chunk.end_col))
    lines = cache.get(chunk.source_path)
    if note is not None or not lines:
        return {}
    return cell_place(chunk.source_path, lines, start, end, chunk.format) or {}


def overlap_supported(text: str, cited: Sequence[Evidence], *, threshold: float) -> bool:
    """The check model statements had before quotes: at least ``threshold`` of the content
    words occur in the cited evidence. Kept so the claims benchmark can compare the two."""
    return len(content_words(text)) >= MIN_CONTENT_WORDS and \
        support_score(text, cited) >= threshold
