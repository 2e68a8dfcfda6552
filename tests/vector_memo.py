"""The real embedder's vectors, remembered between test runs, for the tests that index whole
corpora (the dev set and blind gates, the FastAPI retrieval checks).

Those tests check chunking, ranking and answering; embedding the same texts again with the
same model and the same code would give the same vectors, at minutes a run on two cores. So
each text's vector is kept under a key that covers everything that decides it: the model's
files and export, the embedding code (rag/indexer's embedding, onnx_export, onnx_graph), the
settings that reach the model and the runtime's versions. Change any of these and the tests
embed afresh. Chunks are always made by the code under test; only a text this exact embedder
already turned into a vector is looked up. The embedders' own tests (test_embedding,
test_onnx_graph) never use it.

The vectors live in ``<user cache>/rag/test-vectors/<key>/``, one ``.npz`` file per test run
that embedded something new, written whole; delete the folder to embed everything again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag.core.config import EmbeddingSettings
from rag.core.files import atomic_write
from rag.core.paths import user_cache
from rag.indexer import embedding, onnx_export, onnx_graph

ROOT = user_cache() / "test-vectors"  # read once: some tests point XDG_CACHE_HOME elsewhere
MERGE_AT = 16  # files in a key's folder before they are merged into one
SMALL_FILE = 5_000_000  # model files up to this size are hashed whole, larger ones sampled


def _text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def embedder_key(settings: EmbeddingSettings) -> str | None:
    """What decides the vectors of ``settings``' embedder, hashed; None for a backend this
    does not cover (torch: its vectors are never remembered)."""
    if settings.backend not in ("onnx", "onnx-int8"):
        return None
    model_dir = embedding.resolve_model_dir(settings.model)
    layout = onnx_export.read_layout(model_dir)
    h = hashlib.sha256()
    h.update(onnx_export.cache_stem(layout, settings.model or embedding.DEFAULT_MODEL_NAME)
             .encode())
    h.update(repr(layout).encode())
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        size = path.stat().st_size
        h.update(f"{path.relative_to(model_dir)}\0{size}\0".encode())
        if size <= SMALL_FILE:
            h.update(path.read_bytes())
    for module in (embedding, onnx_export, onnx_graph):
        h.update(Path(str(module.__file__)).read_bytes())
    shaping = settings.model_dump(exclude={"batch_size", "cache_dir", "query_threads"})
    h.update(repr(sorted(shaping.items())).encode())
    for package in ("onnxruntime", "tokenizers", "numpy"):
        h.update(f"{package}={importlib.metadata.version(package)}".encode())
    return h.hexdigest()[:24]


class VectorMemo:
    """Vectors by text, for one embedder key: those on disk, plus what this run added."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.vectors: dict[bytes, np.ndarray] = {}
        self.new: dict[bytes, np.ndarray] = {}
        self.hits = 0
        for path in sorted(folder.glob("*.npz")) if folder.is_dir() else []:
            try:
                with np.load(path, allow_pickle=False) as data:
                    self.vectors.update(zip(data["keys"].tolist(), data["vectors"], strict=True))
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
                continue  # removed by a merge meanwhile, or damaged: embedded again

    def save(self) -> None:
        """Write what this run embedded as one new file; merge the folder when it has many."""
        if not self.new:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        _write(self.folder / f"{uuid.uuid4().hex}.npz", self.new)
        self.new = {}
        files = sorted(self.folder.glob("*.npz"))
        if len(files) >= MERGE_AT:
            _write(self.folder / f"{uuid.uuid4().hex}.npz", self.vectors)
            for path in files:
                path.unlink(missing_ok=True)


def _write(path: Path, vectors: dict[bytes, np.ndarray]) -> None:
    keys = np.array(list(vectors), dtype="S16")
    matrix = np.stack(list(vectors.values())).astype(np.float32)
    atomic_write(path, lambda tmp: _savez(tmp, keys, matrix))


def _savez(tmp: Path, keys: np.ndarray, matrix: np.ndarray) -> None:
    with open(tmp, "wb") as out:
        np.savez(out, keys=keys, vectors=matrix)


class MemoEmbedder:
    """An embedder whose vectors for texts seen before come from a VectorMemo."""

    def __init__(self, inner: Any, memo: VectorMemo) -> None:
        self._inner, self._memo = inner, memo
        self.name, self.dimension = inner.name, inner.dimension

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def count_tokens(self, text: str) -> int:
        return int(self._inner.count_tokens(text))

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        keys = [_text_key(t) for t in texts]
        known = self._memo.vectors
        missing = list(dict.fromkeys(k for k in keys if k not in known))
        if missing:
            where = {k: i for i, k in enumerate(keys)}
            fresh = self._inner.embed_batch([texts[where[k]] for k in missing])
            for k, row in zip(missing, fresh, strict=True):
                known[k] = self._memo.new[k] = np.array(row, dtype=np.float32)
        self._memo.hits += len(keys) - len(missing)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = known[k]
        return out


class Memos:
    """One VectorMemo per embedder key, loaded on first use and saved at the session's end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.by_key: dict[str, VectorMemo] = {}

    def wrap(self, built: Any, settings: EmbeddingSettings) -> Any:
        key = embedder_key(settings)
        if key is None:
            return built
        if key not in self.by_key:
            self.by_key[key] = VectorMemo(self.root / key)
        return MemoEmbedder(built, self.by_key[key])

    def save(self) -> None:
        for memo in self.by_key.values():
            memo.save()


@contextmanager
def remembered(memos: Memos) -> Iterator[None]:
    """Within the block, every embedder rag builds (make_embedder) is memoised."""
    original = embedding.make_embedder

    def make(settings: EmbeddingSettings, *, threads: int | None = None) -> Any:
        return memos.wrap(original(settings, threads=threads), settings)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embedding, "make_embedder", make)
        try:
            yield
        finally:
            memos.save()
