"""A BERT encoder written as an ONNX graph straight from its safetensors weights.

The graph is what Hugging Face's ``BertModel`` computes up to ``last_hidden_state``
(embeddings, then post-LayerNorm encoder layers with exact GELU), built node by node with
``onnx.helper`` from config.json and the weights read by ``safetensors``' numpy API. So the
onnx backend needs neither torch nor transformers, and the build takes about a second.
Pooling and normalisation stay in the embedder (numpy), as for any model it runs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rag.core.errors import ConfigError

OPSET = 17  # LayerNormalization; onnxruntime 1.18 and later run it
IR_VERSION = 8  # the oldest IR that carries opset 17, so older onnxruntime builds load it
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
WEIGHTS_FILE = "model.safetensors"
_TORCH_HINT = 'set embedding.backend = "torch"'


def _unsupported(what: str, where: Path) -> ConfigError:
    return ConfigError(f"embedding model: {what} in {where} is not supported by the onnx "
                       f"backend; {_TORCH_HINT}")


def check_config(config: dict[str, Any], where: Path) -> None:
    """ConfigError unless config.json describes an encoder this module can write."""
    if config.get("model_type") != "bert":
        raise _unsupported(f"model_type {config.get('model_type')!r}", where)
    if config.get("hidden_act", "gelu") != "gelu":
        raise _unsupported(f"hidden_act {config.get('hidden_act')!r}", where)
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise _unsupported(
            f"position_embedding_type {config.get('position_embedding_type')!r}", where
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise _unsupported("a decoder", where)
    hidden, heads = int(config.get("hidden_size", 0)), int(config.get("num_attention_heads", 0))
    if hidden <= 0 or heads <= 0 or hidden % heads:
        raise ConfigError(f"embedding model: hidden_size {hidden} and num_attention_heads "
                          f"{heads} in {where} do not split into heads")


def load_weights(transformer_dir: Path) -> dict[str, np.ndarray]:
    """The encoder's tensors by their BertModel names (a ``bert.`` prefix is dropped)."""
    path = transformer_dir / WEIGHTS_FILE
    if not path.is_file():
        raise ConfigError(f"embedding model: the onnx backend reads {WEIGHTS_FILE}, which "
                          f"{transformer_dir} lacks; {_TORCH_HINT}")
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise ConfigError(f"embedding model: cannot read {path} ({exc})") from None
    return {name.removeprefix("bert."): array for name, array in tensors.items()}


class _Builder:
    """Accumulates nodes and initializers; each method returns its output's name."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        from onnx import helper, numpy_helper

        self._helper, self._numpy_helper = helper, numpy_helper
        self._weights = weights
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def weight(self, name: str, *, transpose: bool = False) -> str:
        try:
            array = self._weights[name]
        except KeyError:
            raise ConfigError(f"embedding model: weight {name!r} is missing from "
                              f"{WEIGHTS_FILE}") from None
        array = np.ascontiguousarray(array.T if transpose else array, dtype=np.float32)
        return self.constant(array, name)

    def constant(self, value: np.ndarray, name: str | None = None) -> str:
        name = name or self._fresh("const")
        self.initializers.append(self._numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, *inputs: str, output: str | None = None, **attrs: Any) -> str:
        out = output or self._fresh(op_type.lower())
        self.nodes.append(self._helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def linear(self, x: str, prefix: str) -> str:
        # Stored as (out, in); MatMul wants (in, out). Torch's exporter writes the same.
        product = self.op("MatMul", x, self.weight(f"{prefix}.weight", transpose=True))
        return self.op("Add", product, self.weight(f"{prefix}.bias"))

    def layer_norm(self, x: str, prefix: str, eps: float, output: str | None = None) -> str:
        return self.op("LayerNormalization", x, self.weight(f"{prefix}.weight"),
                       self.weight(f"{prefix}.bias"), axis=-1, epsilon=eps, output=output)

    def _fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"


def _ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _embeddings(b: _Builder, eps: float) -> str:
    words = b.op("Gather", b.weight("embeddings.word_embeddings.weight"), "input_ids")
    # Positions 0..sequence-1: the first rows of the table, whatever the input's length.
    length = b.op("Slice", b.op("Shape", "input_ids"), b.constant(_ints(1)),
                  b.constant(_ints(2)))
    positions = b.op("Slice", b.weight("embeddings.position_embeddings.weight"),
                     b.constant(_ints(0)), length, b.constant(_ints(0)))
    types = b.op("Gather", b.weight("embeddings.token_type_embeddings.weight"),
                 "token_type_ids")
    summed = b.op("Add", b.op("Add", words, positions), types)
    return b.layer_norm(summed, "embeddings.LayerNorm", eps)


def _mask_bias(b: _Builder) -> str:
    """(batch, 1, 1, sequence): 0 where attended, the float32 minimum at padding."""
    mask = b.op("Cast", "attention_mask", to=1)  # 1 = FLOAT
    inverted = b.op("Sub", b.constant(np.array(1.0, dtype=np.float32)), mask)
    bias = b.op("Mul", inverted, b.constant(np.array(np.finfo(np.float32).min,
                                                     dtype=np.float32)))
    return b.op("Unsqueeze", bias, b.constant(_ints(1, 2)))


def _attention(b: _Builder, x: str, prefix: str, bias: str, heads: int, head_dim: int) -> str:
    split = b.constant(_ints(0, 0, heads, head_dim))

    def project(name: str, perm: list[int]) -> str:
        reshaped = b.op("Reshape", b.linear(x, f"{prefix}.self.{name}"), split)
        return b.op("Transpose", reshaped, perm=perm)

    query = project("query", [0, 2, 1, 3])  # (batch, heads, sequence, head_dim)
    key = project("key", [0, 2, 3, 1])  # (batch, heads, head_dim, sequence)
    value = project("value", [0, 2, 1, 3])
    scale = b.constant(np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    scores = b.op("Add", b.op("Mul", b.op("MatMul", query, key), scale), bias)
    context = b.op("MatMul", b.op("Softmax", scores, axis=-1), value)
    merged = b.op("Reshape", b.op("Transpose", context, perm=[0, 2, 1, 3]),
                  b.constant(_ints(0, 0, heads * head_dim)))
    return b.linear(merged, f"{prefix}.output.dense")


def _gelu(b: _Builder, x: str) -> str:
    # Exact GELU, x/2 * (1 + erf(x/sqrt(2))): BERT's "gelu", which onnxruntime fuses.
    scaled = b.op("Div", x, b.constant(np.array(math.sqrt(2.0), dtype=np.float32)))
    one_plus = b.op("Add", b.op("Erf", scaled), b.constant(np.array(1.0, dtype=np.float32)))
    return b.op("Mul", b.op("Mul", x, one_plus), b.constant(np.array(0.5, dtype=np.float32)))


def _layer(b: _Builder, x: str, i: int, bias: str, config: dict[str, Any], last: bool) -> str:
    prefix, eps = f"encoder.layer.{i}", float(config.get("layer_norm_eps", 1e-12))
    heads = int(config["num_attention_heads"])
    attended = _attention(b, x, f"{prefix}.attention", bias, heads,
                          int(config["hidden_size"]) // heads)
    x = b.layer_norm(b.op("Add", attended, x), f"{prefix}.attention.output.LayerNorm", eps)
    inner = _gelu(b, b.linear(x, f"{prefix}.intermediate.dense"))
    out = b.linear(inner, f"{prefix}.output.dense")
    return b.layer_norm(b.op("Add", out, x), f"{prefix}.output.LayerNorm", eps,
                        output=OUTPUT_NAME if last else None)


def build_model(config: dict[str, Any], weights: dict[str, np.ndarray]) -> Any:
    """The encoder as an ``onnx.ModelProto``: INPUT_NAMES in, OUTPUT_NAME out."""
    from onnx import TensorProto, helper

    b = _Builder(weights)
    eps = float(config.get("layer_norm_eps", 1e-12))
    x, bias = _embeddings(b, eps), _mask_bias(b)
    layers = int(config.get("num_hidden_layers", 0))
    if layers < 1:
        raise ConfigError("embedding model: num_hidden_layers must be at least 1")
    for i in range(layers):
        x = _layer(b, x, i, bias, config, last=i == layers - 1)
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
              for n in INPUT_NAMES]
    output = helper.make_tensor_value_info(
        OUTPUT_NAME, TensorProto.FLOAT, ["batch", "sequence", int(config["hidden_size"])]
    )
    graph = helper.make_graph(b.nodes, "bert_encoder", inputs, [output], b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION, producer_name="rag")


def write_encoder(transformer_dir: Path, config: dict[str, Any], dest: Path) -> None:
    """Build the encoder of the model in transformer_dir and save it as ONNX at dest."""
    import onnx

    check_config(config, transformer_dir / "config.json")
    model = build_model(config, load_weights(transformer_dir))
    onnx.save_model(model, str(dest))
