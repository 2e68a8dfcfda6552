"""A candidate quote: one sentence of the evidence with what it brings (the code, list or
table it introduces), its file lines and the scores rag/answer/scoring.py gives it."""

from __future__ import annotations

from dataclasses import dataclass, field

from rag.core.records import Evidence
from rag.core.text import word_count
from rag.reader.passages import Block
from rag.reader.prose import Sentence

__all__ = ["Passage"]


@dataclass
class Passage:
    """A candidate quote: a sentence plus what it introduces, with its scores."""

    evidence: Evidence
    rank: int  # 0-based position of its evidence
    sentence: Sentence
    text: str  # the quote as the answer shows it
    lines: tuple[int, int]  # file lines, inclusive
    terms: set[str]
    heading: str
    heading_terms: set[str]
    block: Block  # the block of the chunk it is read from (its section, entry, facts)
    dense: float = 0.0
    lexical: float = 0.0
    heading_match: float = 0.0
    window_lexical: float = 0.0
    kind_match: float = 0.0  # the quote holds the kind of thing the question asks for
    score: float = 0.0
    answer: float = 0.0  # score plus how much the quote itself reads as an answer (choose)
    place: float = 1.0  # how much the retriever trusts its chunk, against the best (choose)
    window: list[Passage] = field(default_factory=list)  # what a quote of it runs on to
    read_on: list[Passage] = field(default_factory=list)  # and, as a first quote, then to
    idf: dict[str, float] = field(default_factory=dict)  # question term weights (shared)
    parts: list[float] = field(default_factory=list)  # how well it answers each part
    order: int = 0  # reading order among the evidence's passages (several share a line)
    said: str = ""  # what it says, for the embedder: its sentence, and the words that
    # finish it after the code it introduces ("You can set `x`:" [code] "and then...")
    brings: bool = False  # its quote shows the code, list or table its sentence introduces

    @property
    def words(self) -> int:
        return word_count(self.text)

    @property
    def section(self) -> int:
        """Chunk line of the heading it sits under (-1: none in its chunk)."""
        return self.block.heading_line

    @property
    def entry(self) -> bool:
        """It sits in a definition-list entry (`name` then ": what it is") or an option."""
        return self.block.entry

    @property
    def group(self) -> int:
        """Which entry: blocks indented under one share it."""
        return self.block.group
