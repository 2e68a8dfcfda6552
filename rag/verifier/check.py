"""Checking any text against the docs, sentence by sentence (`rag check`, POST /check, MCP).

Each sentence of the text (rag.reader.prose.claim_sentences) is looked up with the retriever,
so it sees exactly what search shows the caller. Every passage found is read as spans a
quote could cover: each sentence, item, table row or code block of it, and each two
neighbours together (a sentence that sums up two). A span *matches* when it holds
``threshold`` of the sentence's content words, numbers aside (they must agree instead).
Single spans are read before pairs, best first; the sentence is then

* ``supported`` when a matching span agrees with it on numbers with units, versions, code
  identifiers (which may stand in the heading or a definition's term), negation
  (rag.verifier.polarity) and names, each of its clauses stands somewhere in the passage,
  and the docs file still holds those lines: that span is its citation;
* ``conflicting`` when no matching span agrees and one states another number, version or
  identifier, or the opposite: those lines are its citation;
* ``not_found`` otherwise, saying why.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rag.core.errors import UsageError
from rag.core.records import Chunk, SearchHit
from rag.core.text import content_words
from rag.reader.prose import Unit, claim_sentences, units
from rag.retriever.retrieval import Retriever
from rag.verifier.consistency import (
    holds_number,
    identifier_mismatch,
    identifiers,
    name_mismatch,
    number_mismatch,
)
from rag.verifier.polarity import contradiction
from rag.verifier.verification import (
    MIN_CONTENT_WORDS,
    cited_text,
    quote_lines,
    unbacked_clause,
    word_share,
)

Status = Literal["supported", "conflicting", "not_found"]
FOUND = "the passage found"


@dataclass(frozen=True)
class CheckedLines:
    """Lines of a docs file that a checked sentence was compared with, and their text."""

    source_path: str
    start_line: int
    end_line: int
    heading: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"source_path": self.source_path, "start_line": self.start_line,
                "end_line": self.end_line, "heading": self.heading, "text": self.text}

    @property
    def place(self) -> str:
        return f"{self.source_path}:{self.start_line}-{self.end_line}"


@dataclass(frozen=True)
class SentenceCheck:
    """One sentence's verdict: ``line`` is where it starts in the checked text (1-based)."""

    text: str
    line: int
    status: Status
    reason: str
    citations: tuple[CheckedLines, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "line": self.line, "status": self.status,
                "reason": self.reason, "citations": [c.to_dict() for c in self.citations]}


@dataclass(frozen=True)
class Span:
    """A stretch of one chunk's lines (1-based, in its file) and what it says."""

    chunk: Chunk
    start_line: int
    end_line: int
    text: str
    single: bool = True  # one unit, not two together

    def lines(self) -> CheckedLines:
        return CheckedLines(self.chunk.source_path, self.start_line, self.end_line,
                            self.chunk.heading, cited_text(self.chunk, self.start_line,
                                                           self.end_line))


def spans(chunk: Chunk) -> list[Span]:
    """Each unit of the chunk and each two neighbours together; a chunk that cannot say
    which of its lines a unit stands on (a piece of one long line) is one span."""
    found = units(chunk.text)
    whole = Span(chunk, chunk.start_line, chunk.end_line, chunk.text, single=False)
    if len(chunk.text.split("\n")) != chunk.end_line - chunk.start_line + 1 or not found:
        return [whole]

    def span(first: Unit, last: Unit) -> Span:
        text = first.text if first is last else f"{first.text}\n{last.text}"
        return Span(chunk, chunk.start_line + first.first, chunk.start_line + last.last, text,
                    single=first is last)

    out = [span(u, u) for u in found]
    out += [span(a, b) for a, b in itertools.pairwise(found)]
    return out


def topic_share(sentence: str, span: Span) -> float:
    """Share of the sentence's content words, numbers aside, in the span and its heading."""
    words = [w for w in content_words(sentence) if not holds_number(w)]
    if not words:
        return 1.0  # only numbers: they decide on their own
    return word_share(" ".join(words), [f"{span.chunk.heading or ''}\n{span.text}"])


def _evidence(span: Span) -> str:
    """What a name may come from: the path, the heading and the whole passage."""
    return f"{span.chunk.source_path}\n{span.chunk.heading or ''}\n{span.chunk.text}"


def _named(span: Span) -> str:
    """The span with what names its subject: the heading, and the term of the definition
    list entry it stands in ("`timeout`" above ": ... Default is `60s`.")."""
    from rag.reader.passages import read_blocks

    terms = [span.chunk.text.split("\n")[b.group] for b in read_blocks(span.chunk.text)
             if b.group >= 0 and span.chunk.start_line + b.first <= span.start_line
             <= span.chunk.start_line + b.last]
    return "\n".join([span.chunk.heading or "", *terms, span.text])


def _conflict(sentence: str, span: Span) -> str | None:
    """How the span contradicts the sentence (a number, version, identifier or negation it
    states otherwise), or None when it only lacks something."""
    said = number_mismatch(sentence, span.text, FOUND)
    if said and holds_number(span.text):
        return said
    said = identifier_mismatch(sentence, span.text, FOUND)
    if said and identifiers(span.text):
        return said
    return contradiction(sentence, span.text, FOUND)


def _disagreement(sentence: str, span: Span) -> str | None:
    """Why the span does not back the sentence (see the module docstring), or None."""
    # Each clause somewhere in the passage: a summary's second clause may stand a few
    # sentences further on; a claim added to a backed one stands nowhere.
    prose = " ".join(w for w in sentence.split() if not holds_number(w))
    if part := unbacked_clause(prose, [f"{span.chunk.heading or ''}\n{span.chunk.text}"]):
        return f"{FOUND} does not say {part!r}"
    return (number_mismatch(sentence, span.text, FOUND)
            or identifier_mismatch(sentence, _named(span), FOUND)
            or _conflict(sentence, span)
            or name_mismatch(sentence, _evidence(span)))


def judge(sentence: str, hits: Sequence[SearchHit], threshold: float, line: int = 1,
          moved: Callable[[Span], str | None] = lambda _: None) -> SentenceCheck:
    """The verdict on one sentence from the passages found for it. ``moved`` says why a
    span's file no longer holds its lines (None while it does): then the lines back
    nothing, and the sentence is not_found until the index is brought up to date."""
    candidates = [s for hit in hits for s in spans(hit.chunk)]
    if not candidates:
        return SentenceCheck(sentence, line, "not_found", "nothing in the docs matches it")
    scored = sorted(((topic_share(sentence, s), s) for s in candidates),
                    key=lambda x: (-x[0], x[1].end_line - x[1].start_line))
    matching = [s for share, s in scored if share >= threshold]
    if not matching:
        share, best = scored[0]
        return SentenceCheck(sentence, line, "not_found",
                             f"at most {share:.0%} of its words are in any passage found "
                             f"(closest: {best.lines().place})")
    status, span, why = _verdict(sentence, matching)
    if span is None:
        return SentenceCheck(sentence, line, "not_found", why)
    if (stale := moved(span)) is not None:
        return SentenceCheck(sentence, line, "not_found", stale)
    cited = span.lines()
    return SentenceCheck(sentence, line, status, why and f"{why} ({cited.place})", (cited,))


def _verdict(sentence: str, matching: Sequence[Span]) -> tuple[Status, Span | None, str]:
    """(status, the span cited, why) over the matching spans, best first. Single units are
    read before pairs, the narrowest evidence first: the first that agrees supports the
    sentence, else the first that contradicts it conflicts with it; a pair only decides a
    sentence no single unit does (one that sums up two)."""
    single = [s for s in matching if s.single]
    for group in (single, [s for s in matching if not s.single]):
        for span in group:
            if _disagreement(sentence, span) is None:
                return "supported", span, ""
        for span in group:
            if (why := _conflict(sentence, span)) is not None:
                return "conflicting", span, why
    best = matching[0]
    why = _disagreement(sentence, best) or "no passage found says it"
    return "not_found", None, f"{why} ({best.lines().place})"


def checkable(text: str) -> list[Unit]:
    """The sentences of ``text`` worth checking: those with two content words or more
    ("See below." states nothing the docs could back)."""
    return [u for u in claim_sentences(text) if len(content_words(u.text)) >= MIN_CONTENT_WORDS]


def check_text(text: str, retriever: Retriever, docs: Path, *, threshold: float,
               groups: Iterable[str] = (), mode: str | None = None, k: int | None = None,
               max_sentences: int | None = None) -> list[SentenceCheck]:
    """Every checkable sentence of ``text``, judged against the docs ``groups`` may see.

    Empty when the text states nothing to check (headings, code and sentences of fewer
    than two content words are not checked); UsageError for more than ``max_sentences``
    sentences. A supported sentence's lines are read again from the docs file: where the
    file no longer holds them, the sentence is not_found until the index is brought up to
    date (a stale index never backs a claim).
    """
    said = checkable(text)
    if max_sentences is not None and len(said) > max_sentences:
        raise UsageError(f"the text has {len(said)} sentences to check; at most "
                         f"{max_sentences} are checked at once")
    allowed = frozenset(groups)
    files: dict[str, list[str] | None] = {}

    def moved(span: Span) -> str | None:
        c = span.chunk
        return quote_lines(docs, c.source_path, span.start_line, span.end_line,
                           span.lines().text, files, cols=(c.start_col, c.end_col))[1]

    return [judge(u.text, retriever.search(u.text, k=k, mode=mode, groups=allowed), threshold,
                  u.first + 1, moved) for u in said]


def load_text(path: Path, max_bytes: int) -> str:
    """The text of the file `rag check` is given, read under ``docs.max_file_bytes``;
    UsageError (one line, exit 2) for a missing, binary, non-UTF-8 or empty file, or one
    that states nothing to check."""
    from rag.reader.walker import read_text

    if not path.exists():
        raise UsageError(f"{path}: no such file")
    text, _, problem = read_text(path, str(path), max_bytes)
    if text is None:  # read_text's reason reads "skipped <path>: why"
        why = (problem or "unreadable").split(": ", 1)[-1].replace(", not Markdown", "")
        raise UsageError(f"{path}: cannot be checked ({why})")
    if not text.strip():
        raise UsageError(f"{path} is empty: nothing to check")
    if not checkable(text):
        raise UsageError(f"{path}: no sentence to check (headings, code and sentences of "
                         "fewer than two content words are not checked)")
    return text
