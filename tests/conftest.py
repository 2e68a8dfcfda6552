"""Shared fixtures: a copy of the tiny docs corpus, a fake embedder, default settings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.records import Chunk, SearchHit
from rag.indexer.embedding import FakeEmbedder
from rag.reader.passages import read_blocks
from rag.reader.prose import sentences

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
