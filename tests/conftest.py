"""Shared fixtures: a copy of the tiny docs corpus, a fake embedder, default settings; and,
made once per run for every file that needs them, a PostgreSQL server (tests/pg_server.py),
the real embedder's remembered vectors (tests/vector_memo.py), the ONNX export, the torch
reference embedder and the bundled model's Q4_0 copy."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.core.records import Chunk, SearchHit
from rag.indexer.embedding import Embedder, FakeEmbedder
from rag.reader.passages import read_blocks
from rag.reader.prose import sentences
from rag.retriever.evidence import CLOSE_TAG, NO_HEADING, OPEN_TAG
from tests.pg_server import pg_dsn, pg_server  # noqa: F401 - fixtures, one server a run
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


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ONNX export folder of this run only: the user's cache may hold an export that an
    older version of the code wrote. The first test to build the real model exports it."""
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="session")
def torch_embedder() -> Embedder:
    """sentence-transformers itself, the reference the ONNX backend is held to."""
    pytest.importorskip("sentence_transformers", reason="the [torch] extra is not installed")
    from rag.core.config import EmbeddingSettings
    from rag.indexer.embedding import make_embedder

    return make_embedder(EmbeddingSettings(backend="torch"))


@pytest.fixture(scope="session")
def q4_0_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled model's Q4_0 copy (rag.generator.local.model_file), made once a run."""
    pytest.importorskip("gguf")
    from rag.generator.local.model import default_gguf_path
    from rag.generator.local.model_file import fast_copy

    return fast_copy(default_gguf_path(), tmp_path_factory.mktemp("models"))


def seed_model_cache(q4_0_model: Path) -> Path:
    """Put the run's Q4_0 copy where the bundled model's copy is kept in the user cache
    (the copy is named after the shipped file only), so code that makes it finds it made."""
    from rag.generator.local.model_file import model_cache

    target = model_cache() / q4_0_model.name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(q4_0_model, target)
    except OSError:  # another filesystem
        shutil.copyfile(q4_0_model, target)
    return target


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
