"""Shared fixtures: a copy of the tiny docs corpus, a fake embedder, default settings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rag.config import Settings
from rag.embedding import FakeEmbedder

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
