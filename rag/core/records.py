"""Typed records that flow between the pipeline's stages (see docs: contracts).

A Source is one docs file under the docs root, named by its path relative to that root;
chunks, hits, evidence and citations all point into one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Chunk:
    """A contiguous span of one Source; lines are 1-based and inclusive."""

    chunk_id: str
    source_id: str
    source_path: str
    text: str
    start_line: int
    end_line: int
    heading: str | None = None  # heading path, e.g. "Install > From source"
    visibility: tuple[str, ...] = ()
    # Only for a piece of one long line (start_line == end_line): text is
    # line[start_col:end_col], in code points. None for chunks of whole lines.
    start_col: int | None = None
    end_col: int | None = None
    # The reader the indexer read its file with ("markdown", "rst", "notebook", "html",
    # "text"), so answering reads the chunk the same way; None in an index from before it
    # was recorded (then rag.reader.formats.reader_for decides, as it did).
    format: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["visibility"] = list(self.visibility)
        for key in ("start_col", "end_col", "format"):  # written only where they mean something
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(
            chunk_id=data["chunk_id"],
            source_id=data["source_id"],
            source_path=data["source_path"],
            text=data["text"],
            start_line=int(data["start_line"]),
            end_line=int(data["end_line"]),
            heading=data.get("heading"),
            visibility=tuple(data.get("visibility") or ()),
            start_col=_optional_int(data.get("start_col")),
            end_col=_optional_int(data.get("end_col")),
            format=data.get("format"),
        )


@dataclass(frozen=True)
class SearchHit:
    """A Chunk ranked by the retriever (rank is 1-based)."""

    chunk: Chunk
    score: float
    rank: int
    # A hit may span several adjacent chunks of one section: their ids in line order.
    # chunk.chunk_id is the best-scoring one of them; empty means just chunk.chunk_id.
    chunk_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = self.chunk.to_dict()
        data.update(score=self.score, rank=self.rank,
                    chunk_ids=list(self.chunk_ids or (self.chunk.chunk_id,)))
        return data


@dataclass(frozen=True)
class Evidence:
    """A selected Search Hit with its label (E1, E2, ... in selection order)."""

    label: str
    hit: SearchHit

    @property
    def chunk(self) -> Chunk:
        return self.hit.chunk

    def to_dict(self) -> dict[str, Any]:
        data = self.hit.to_dict()
        data["label"] = self.label
        return data


@dataclass(frozen=True)
class Citation:
    """A label the verifier mapped back to a real place in a Source."""

    label: str
    source_path: str
    chunk_id: str
    start_line: int
    end_line: int
    heading: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Statement:
    """One sentence of an answer with the citations that support it."""

    text: str
    citations: tuple[Citation, ...]
    supported: bool = True
    support_score: float = 0.0
    quote: str = ""  # the words of the evidence that back it (the text itself when verbatim)
    reason: str = ""  # why it is not supported; empty when it is

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "citations": [c.to_dict() for c in self.citations],
            "supported": self.supported,
            "support_score": self.support_score,
            "quote": self.quote,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Answer:
    """What `rag ask` returns: verified statements only, plus what was shown to the model."""

    question: str
    answer: str
    statements: tuple[Statement, ...]
    citations: tuple[Citation, ...]
    insufficient_evidence: bool
    evidence: tuple[Evidence, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (chunk_id, reason) left out of the evidence
    generator: str = ""
    extractive_fallback: bool = False  # the model's answer failed; an extractive one stands in
    unsupported: tuple[Statement, ...] = ()  # shown only when config says "mark"
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    tokens: dict[str, int] = field(default_factory=dict)  # prompt / completion
    label_checks: dict[str, int] = field(default_factory=dict)  # labels cited / verified
    hits: tuple[SearchHit, ...] = ()  # what retrieval returned, before evidence selection
    abstention: dict[str, float] = field(default_factory=dict)  # signals of the decision

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "statements": [s.to_dict() for s in self.statements],
            "citations": [c.to_dict() for c in self.citations],
            "insufficient_evidence": self.insufficient_evidence,
            "evidence": [e.to_dict() for e in self.evidence],
            "excluded": [{"chunk_id": cid, "reason": why} for cid, why in self.excluded],
            "generator": self.generator,
            "extractive_fallback": self.extractive_fallback,
            "unsupported": [s.to_dict() for s in self.unsupported],
            "timings": self.timings,
            "tokens": self.tokens,
            "label_checks": self.label_checks,
            "abstention": self.abstention,
        }


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
