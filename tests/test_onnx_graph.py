"""The ONNX encoder written from safetensors: it computes what BertModel computes.

Without torch: a tiny random BERT runs on onnxruntime, padding and batching leave a text's
token vectors alone, and models the graph cannot express are refused with a pointer to the
torch backend. With torch (the ``[torch]`` extra): the graph equals transformers' BertModel
on a random model, and the bundled model's vectors equal sentence-transformers' and the
torch-exported ONNX file's on a hundred real chunks taken across the docs, short and long.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag.core.config import EmbeddingSettings, Settings
from rag.core.errors import ConfigError
from rag.indexer import onnx_export, onnx_graph
from rag.indexer.common import embed_text
from rag.indexer.embedding import Embedder, default_model_path, make_embedder
from rag.reader.chunking import chunk_document
from tests.conftest import FIXTURE_DOCS, corpus_dir

TINY = {"model_type": "bert", "hidden_size": 16, "num_attention_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 24, "vocab_size": 50,
        "max_position_embeddings": 32, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "hidden_act": "gelu"}
PARITY = 0.99999  # cosine every real chunk must reach against the torch backend


def _tiny_weights(config: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, inner = config["hidden_size"], config["intermediate_size"]

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.5, shape).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": rand(config["vocab_size"], h),
        "embeddings.position_embeddings.weight": rand(config["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": rand(config["type_vocab_size"], h),
        "embeddings.LayerNorm.weight": 1 + rand(h), "embeddings.LayerNorm.bias": rand(h),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        shapes = {"attention.self.query": (h, h), "attention.self.key": (h, h),
                  "attention.self.value": (h, h), "attention.output.dense": (h, h),
                  "intermediate.dense": (inner, h), "output.dense": (h, inner)}
        for name, (out, in_) in shapes.items():
            weights[f"{p}.{name}.weight"], weights[f"{p}.{name}.bias"] = rand(out, in_), rand(out)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{p}.{norm}.weight"], weights[f"{p}.{norm}.bias"] = 1 + rand(h), rand(h)
    return weights


def _tiny_model(folder: Path, config: dict[str, Any] = TINY, prefix: str = "") -> Path:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    weights = {prefix + k: v for k, v in _tiny_weights(config).items()}
    save_file(weights, str(folder / onnx_graph.WEIGHTS_FILE))
    return folder


def _session(model_dir: Path, dest: Path) -> Any:
    config = json.loads((model_dir / "config.json").read_text())
    onnx_graph.write_encoder(model_dir, config, dest)
    session = onnx_export.load_session(dest, threads=1)
    assert session is not None
    return session


def _run(session: Any, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return np.asarray(session.run(None, feeds)[0])


# --- No torch ----------------------------------------------------------------------------


def test_padding_and_batching_leave_token_vectors_alone(tmp_path: Path) -> None:
    session = _session(_tiny_model(tmp_path / "m", prefix="bert."), tmp_path / "m.onnx")
    assert [i.name for i in session.get_inputs()] == list(onnx_export.INPUT_NAMES)
    short, long = [2, 7, 9, 3], [2, 11, 5, 8, 13, 21, 3]
    alone = _run(session, np.array([short]), np.ones((1, 4), np.int64), np.zeros((1, 4), np.int64))
    # The short text padded to the long one's length, in one batch with it.
    ids = np.array([short + [0] * 3, long])
    mask = np.array([[1] * 4 + [0] * 3, [1] * 7])
    types = np.array([[0] * 7, [0] * 4 + [1] * 3])
    batched = _run(session, ids, mask, types)
    assert batched.shape == (2, 7, TINY["hidden_size"])
    np.testing.assert_allclose(batched[0, :4], alone[0], atol=1e-5)
    assert np.isfinite(batched).all()
    # Segment ids feed the embeddings: the same ids as segment 0 give other vectors.
    same_segment = _run(session, ids[1:], mask[1:], np.zeros((1, 7), np.int64))
    assert not np.allclose(same_segment[0], batched[1], atol=1e-3)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"model_type": "roberta"}, "model_type 'roberta'"),
     ({"hidden_act": "relu"}, "hidden_act 'relu'"),
     ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
     ({"num_attention_heads": 5}, "do not split into heads")],
)
def test_models_the_graph_cannot_express_are_refused(
    change: dict[str, Any], message: str, tmp_path: Path
) -> None:
    folder = _tiny_model(tmp_path / "m", {**TINY, **change})
    config = json.loads((folder / "config.json").read_text())
    with pytest.raises(ConfigError, match=message):
        onnx_graph.write_encoder(folder, config, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_missing_safetensors_or_tensor_is_one_clear_error(tmp_path: Path) -> None:
    folder = _tiny_model(tmp_path / "m")
    (folder / onnx_graph.WEIGHTS_FILE).rename(folder / "pytorch_model.bin")
    with pytest.raises(ConfigError, match='reads model.safetensors.*backend = "torch"'):
        onnx_graph.write_encoder(folder, TINY, tmp_path / "m.onnx")
    from safetensors.numpy import save_file

    weights = _tiny_weights(TINY)
    del weights["encoder.layer.1.output.dense.bias"]
    save_file(weights, str(folder / onnx_graph.WEIGHTS_FILE))
    with pytest.raises(ConfigError, match="encoder.layer.1.output.dense.bias"):
        onnx_graph.write_encoder(folder, TINY, tmp_path / "m.onnx")


# --- With torch ------------------------------------------------------------------------


@pytest.mark.slow
def test_graph_equals_transformers_bert_on_a_random_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = _tiny_model(tmp_path / "m")
    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager")
    model.eval()
    session = _session(folder, tmp_path / "m.onnx")
    ids = np.array([[2, 7, 9, 3, 0, 0], [2, 11, 5, 8, 13, 3]])
    mask = (ids > 0).astype(np.int64)
    types = np.array([[0] * 6, [0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                         token_type_ids=torch.tensor(types)).last_hidden_state.numpy()
    got = _run(session, ids, mask, types)
    real = mask.astype(bool)  # padded positions are never read
    np.testing.assert_allclose(got[real], expected[real], atol=1e-4)


def real_chunks(limit: int = 100) -> list[str]:
    """What indexing embeds for tests/fixtures/docs and a spread of the FastAPI docs."""
    model = Path(default_model_path())
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_truncation()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    chunking = Settings().chunking
    texts: list[str] = []
    for root in (FIXTURE_DOCS, corpus_dir("fastapi")):
        for path in sorted(root.rglob("*.md")):
            rel = path.relative_to(root).as_posix()
            chunks = chunk_document(path.read_text(encoding="utf-8"), rel,
                                    max_tokens=chunking.max_tokens,
                                    min_tokens=chunking.min_tokens, count_tokens=count,
                                    visibility=("public",))
            texts.extend(embed_text(c) for c in chunks)
    step = max(1, len(texts) // limit)  # every step-th chunk: all files, short and long
    return texts[::step][:limit]


@pytest.mark.slow
def test_vectors_equal_the_torch_backend_on_real_chunks(
        onnx_cache: Path, torch_embedder: Embedder) -> None:
    """Indexes built before the graph builder (from torch's exporter's file) hold the torch
    backend's vectors too, so they stay valid; the graph's token vectors are compared with
    transformers' BERT above."""
    texts = real_chunks()
    assert len(texts) >= 90
    built: Embedder = make_embedder(EmbeddingSettings(cache_dir=str(onnx_cache)))
    vectors = built.embed_batch(texts)

    reference = torch_embedder.embed_batch(texts)
    assert vectors.shape == reference.shape == (len(texts), 384)
    assert np.sum(vectors * reference, axis=1).min() >= PARITY
