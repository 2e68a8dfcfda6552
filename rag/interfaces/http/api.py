"""HTTP API shapes of `rag serve`: request and response models, and an Answer as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag.core.records import Answer
from rag.verifier.verification import cell_fields, cited_text, quote_lines

Mode = Literal["dense", "lexical", "hybrid"]
# Something besides whitespace, as Python's str.strip() sees it (\x1c-\x1f included), so
# the schema and the server agree on what a blank question is.
NOT_BLANK = r"[^\s\x1c-\x1f]"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not ignored


class AskRequest(_Request):
    question: str = Field(..., min_length=1, max_length=4000, pattern=NOT_BLANK,
                          description="The question, in plain words.")
    groups: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=64,
        description="Ignored unless the server runs with --dev-trust-claimed-groups: the "
        "groups come from the API token or the authenticating proxy.")
    mode: Mode | None = Field(None, description="Search mode; default from config.")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


class CheckRequest(_Request):
    text: str = Field(..., min_length=1, pattern=NOT_BLANK,
                      description="The text to check (Markdown or plain): a draft answer, a "
                      "README, a reply. Each of its sentences is checked against the docs.")
    groups: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=64,
        description="Ignored unless the server runs with --dev-trust-claimed-groups: the "
        "groups come from the API token or the authenticating proxy.")
    mode: Mode | None = Field(None, description="Search mode; default from config.")


class IndexRequest(_Request):
    rebuild: bool = Field(False, description="Re-embed everything instead of only changes.")


class Line(BaseModel):
    number: int
    text: str


class CitationOut(BaseModel):
    label: str
    source_path: str
    chunk_id: str
    start_line: int
    end_line: int
    heading: str | None
    lines: list[Line] = Field(description="The cited lines as the docs file has them now.")
    lines_note: str | None = Field(None, description="Why `lines` is empty, if it is.")
    cell: int | None = Field(None, description="In a notebook: the cell (from 1) the cited "
                             "lines start in; null for other files.")
    cell_lines: list[int] | None = Field(None, description="In a notebook: the first and last "
                                         "cited line, counted within their cell.")
    end_cell: int | None = Field(None, description="In a notebook, when the cited lines run "
                                 "on into a later cell: that cell (the last number of "
                                 "`cell_lines` counts in it).")


class StatementOut(BaseModel):
    text: str
    citations: list[CitationOut]
    supported: bool
    support_score: float
    quote: str = Field("", description="The evidence's words that back the statement.")
    reason: str = Field("", description="Why the statement is not supported; empty if it is.")


class HitOut(BaseModel):
    chunk_id: str
    source_id: str
    source_path: str
    text: str
    start_line: int
    end_line: int
    heading: str | None
    visibility: list[str]
    score: float
    rank: int


class EvidenceOut(HitOut):
    label: str


class ExcludedOut(BaseModel):
    chunk_id: str
    reason: str
    source_path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    heading: str | None = None


class AnswerOut(BaseModel):
    question: str
    answer: str
    statements: list[StatementOut]
    citations: list[CitationOut]
    insufficient_evidence: bool
    evidence: list[EvidenceOut]
    excluded: list[ExcludedOut]
    generator: str
    extractive_fallback: bool
    unsupported: list[StatementOut]
    timings: dict[str, float]
    tokens: dict[str, int]
    label_checks: dict[str, int]
    index_version: str


class CheckedLinesOut(BaseModel):
    source_path: str
    start_line: int
    end_line: int
    heading: str | None
    text: str = Field(description="The lines, as the docs file holds them now.")


class SentenceOut(BaseModel):
    text: str
    line: int = Field(description="Line of the checked text the sentence starts on.")
    status: Literal["supported", "conflicting", "not_found"]
    reason: str = Field(description="Why it is not supported; empty when it is.")
    citations: list[CheckedLinesOut] = Field(
        description="supported: the lines that back it; conflicting: the lines that state "
        "otherwise; not_found: none.")


class CheckOut(BaseModel):
    all_supported: bool = Field(description="Whether some sentence was checked and every "
                                "one is supported.")
    sentences: list[SentenceOut]
    version: str


class SearchOut(BaseModel):
    query: str
    version: str
    hits: list[HitOut]


class HealthOut(BaseModel):
    status: str
    chunks: int = Field(description="Chunks of the loaded index that the asker may see.")
    version: str
    user: str | None = Field(description="Who the server takes the asker for; null = anonymous.")
    tokens: bool = Field(description="Whether the server accepts API tokens.")
    claimed_groups: bool = Field(description="Whether groups sent with a request are believed "
                                             "(development only).")


class IndexOut(BaseModel):
    version: str
    chunks: int
    summary: str
    report: dict[str, Any]


class ErrorOut(BaseModel):
    error: str


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 409, 415, 421, 422, 500, 503)
}
# Requests with a body may also get 413: over [server] max_body_bytes (rag.interfaces.http.bodylimit).
POST_ERRORS: dict[int | str, dict[str, Any]] = {**ERRORS, 413: {"model": ErrorOut}}


def answer_payload(answer: Answer, docs: Path, version: str) -> dict[str, Any]:
    """Answer.to_dict() plus the cited lines, where excluded evidence came from, the version."""
    data = answer.to_dict()
    indexed = {e.chunk.chunk_id: e.chunk for e in answer.evidence}
    files: dict[str, list[str] | None] = {}

    def with_lines(citation: dict[str, Any]) -> dict[str, Any]:
        chunk = indexed.get(citation["chunk_id"])
        start, end = citation["start_line"], citation["end_line"]
        expected = cited_text(chunk, start, end) if chunk is not None else ""
        lines, note = quote_lines(docs, citation["source_path"], start, end, expected, files,
                                  cols=(chunk.start_col, chunk.end_col) if chunk else (None, None))
        cell = cell_fields(docs, chunk, start, end, files) if chunk is not None else {}
        return {**citation, "lines": [{"number": n, "text": t} for n, t in lines],
                "lines_note": note, **cell}

    data["citations"] = [with_lines(c) for c in data["citations"]]
    for key in ("statements", "unsupported"):
        for statement in data[key]:
            statement["citations"] = [with_lines(c) for c in statement["citations"]]
    hits = {h.chunk.chunk_id: h.chunk for h in answer.hits}
    for item in data["excluded"]:
        chunk = hits.get(item["chunk_id"])
        if chunk is not None and item["reason"] != "not_visible":  # never reveal hidden paths
            item.update(source_path=chunk.source_path, start_line=chunk.start_line,
                        end_line=chunk.end_line, heading=chunk.heading)
    data["index_version"] = version
    return data
