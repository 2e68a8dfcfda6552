"""What every generator backend shares: the answer's shape and the Generator interface.

It imports no backend, so each backend (rag.answer.extractive, rag.answer.passage, rag.generator.openai_compat,
rag.generator.local.model) can build a GenerationResult without importing rag.generator.backends, which
chooses among them: imports point from the chooser to the backends to this module only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

if TYPE_CHECKING:
    from rag.core.records import Evidence


class ModelStatement(BaseModel):
    """One sentence of the model's answer, the evidence labels that support it, and a short
    verbatim quote from that evidence (pieces may be joined by "..."). The verifier finds the
    quote in the evidence and cites its lines; a statement without one must be verbatim."""

    model_config = ConfigDict(extra="forbid", strict=True)
    text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    evidence: list[str] = Field(min_length=1)
    quote: Annotated[str, StringConstraints(strip_whitespace=True)] = ""


class ModelAnswer(BaseModel):
    """The model's structured answer exactly as the schema allows it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    statements: list[ModelStatement]
    insufficient_evidence: bool


@dataclass(frozen=True)
class GenerationResult:
    """A validated answer plus what it cost (tokens summed over all attempts)."""

    answer: ModelAnswer
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    model: str
    # File lines (start, end) each statement quotes verbatim, when the generator knows them
    # (the extractive one does); the verifier narrows those citations to these lines.
    quotes: tuple[tuple[int, int] | None, ...] = ()
    # The evidence the quotes were read from, where a quote read a hit on into its
    # section's next chunk (the extractive one may); None: the evidence it was given.
    evidence: tuple[Evidence, ...] | None = None


class Generator(Protocol):
    """A backend that answers from evidence; chosen by name in `rag.generator.backends.make_generator`."""

    name: str

    def generate(self, question: str, evidence: Sequence[Evidence]) -> GenerationResult: ...


# Reads a hit on into the next chunk of its section (Retriever.read_on, for the asking
# user's groups); None where it cannot. A generator that quotes may take one.
ReadOn = Callable[["Evidence"], "Evidence | None"]
