"""Shared fixtures: a copy of the tiny docs corpus, a fake embedder, default settings, and
the real embedder's vectors remembered between runs (tests/vector_memo.py)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.records import Chunk, SearchHit
from rag.indexer.embedding import FakeEmbedder
from rag.reader.passages import read_blocks
from rag.reader.prose import sentences
from rag.retriever.evidence import CLOSE_TAG, NO_HEADING, OPEN_TAG
from tests.vector_memo import ROOT as VECTORS_ROOT
from tests.vector_memo import Memos, remembered

FIXTURE_DOCS = Path(__file__).parent / "fixtures" / "docs"
CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """A writable copy of tests/fixtures/docs."""
    target = tmp_path / "docs"
    shutil.copytree(FIXTURE_DOCS, target)
    return target


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def memos() -> Memos:
    """The real embedder's vectors from earlier runs (tests/vector_memo.py)."""
    return Memos(VECTORS_ROOT)


@pytest.fixture
def remembered_vectors(memos: Memos) -> Iterator[Memos]:
    """Every embedder rag builds during the test looks up texts it embedded before."""
    with remembered(memos):
        yield memos


def corpus_dir(name: str) -> Path:
    """A folder of ../shared/corpora, or skip when this checkout has none beside it."""
    path = CORPORA / name
    if not path.is_dir():
        pytest.skip(f"{path} is not available")
    return path


def make_hit(
    chunk_id: str,
    source: str = "docs/a.md",
    text: str = "some text",
    *,
    heading: str | None = "Intro",
    lines: tuple[int, int] = (1, 3),
    rank: int = 1,
    visibility: tuple[str, ...] = (),
) -> SearchHit:
    """A Search Hit built by hand, for evidence and verifier tests."""
    chunk = Chunk(
        chunk_id=chunk_id,
        source_id=source,
        source_path=source,
        text=text,
        start_line=lines[0],
        end_line=lines[1],
        heading=heading,
        visibility=visibility,
    )
    return SearchHit(chunk=chunk, score=1.0 / rank, rank=rank)


def quotable_sentences(text: str) -> list[str]:
    """The sentences of a chunk's Markdown that a quote can start with, verbatim (code,
    markup and "...and then" continuations skipped)."""
    return [s.text for s in sentences(read_blocks(text)) if not s.continues]


_LABEL_LINE = re.compile(r"Evidence (E[1-9][0-9]*)")
_SPAN = re.compile(r"([0-9]+)-([0-9]+)")


def _expect(lines: list[str], i: int, prefix: str, label: str) -> str:
    if i >= len(lines) or not lines[i].startswith(prefix):
        raise ValueError(f"evidence block {label}: expected a line starting with {prefix!r}")
    return lines[i][len(prefix):]


def parse_evidence_blocks(prompt: str) -> list[dict]:
    """Read formatted blocks back out of a prompt (the inverse of format_evidence_blocks),
    as a model that reads the format exactly would.

    Text outside blocks is ignored; a block that starts but is malformed raises ValueError.
    Content comes back neutralised, exactly as the model saw it.
    """
    lines = prompt.split("\n")
    blocks: list[dict] = []
    i = 0
    while i < len(lines):
        m = _LABEL_LINE.fullmatch(lines[i])
        if not m:
            i += 1
            continue
        label = m.group(1)
        path = _expect(lines, i + 1, "Source: ", label)
        span = _SPAN.fullmatch(_expect(lines, i + 2, "Lines: ", label))
        if span is None:
            raise ValueError(f"evidence block {label}: malformed Lines header")
        heading = _expect(lines, i + 3, "Heading: ", label)
        if lines[i + 4 : i + 6] != ["Content:", OPEN_TAG]:
            raise ValueError(f"evidence block {label}: expected 'Content:' then {OPEN_TAG}")
        try:
            end = lines.index(CLOSE_TAG, i + 6)
        except ValueError:
            raise ValueError(f"evidence block {label}: {CLOSE_TAG} missing") from None
        blocks.append({
            "label": label,
            "source_path": path,
            "start_line": int(span.group(1)),
            "end_line": int(span.group(2)),
            "heading": None if heading == NO_HEADING else heading,
            "content": "\n".join(lines[i + 6 : end]),
        })
        i = end + 1
    return blocks
