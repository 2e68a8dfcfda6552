"""The ONNX file of a sentence-transformers model, cached on disk, plus its int8 variant.

The file is built once per model from its safetensors weights (onnx_graph, no torch): the
cached file's name carries a fingerprint of the model's config and weights, so a different
or updated model never reuses a stale graph. Files are written whole
(rag.core.files.atomic_write), so a crash mid-export leaves no half-written cache; a cache
file that onnxruntime cannot load (corrupted on disk, truncated by hand) is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag.core.errors import ConfigError
from rag.core.files import atomic_write
from rag.indexer.onnx_graph import INPUT_NAMES, OPSET, OUTPUT_NAME, WEIGHTS_FILE, write_encoder

if TYPE_CHECKING:
    import onnxruntime

log = logging.getLogger(__name__)

# Bump when the built graph changes shape or meaning, so old caches are not reused.
# 2: written by onnx_graph from the safetensors weights (1 was torch's exporter).
EXPORT_FORMAT = 2
POOLING_MODES = ("mean", "cls", "max")
_SAMPLE_WINDOW = 1 << 20  # bytes read from each of several places in a weights file
SHARED_FILE = 0o644  # a cache file: other users of the machine may read the same model


@dataclass(frozen=True)
class ModelLayout:
    """What the ONNX path needs to know about a sentence-transformers model folder."""

    root: Path
    transformer_dir: Path  # holds config.json, the weights and tokenizer.json
    max_seq_length: int  # word-pieces per input, special tokens included
    do_lower_case: bool
    pooling: str  # one of POOLING_MODES
    dimension: int

    @property
    def tokenizer_file(self) -> Path:
        return self.transformer_dir / "tokenizer.json"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"embedding model: cannot read {path} ({exc})") from None


_FLAG_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
}


def _pooling_mode(config: dict[str, Any], where: Path) -> str:
    # Newer configs name the mode; older ones set one boolean flag per mode.
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        mode = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max"}.get(mode, mode)
    else:
        on = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
        mode = _FLAG_MODES.get(on[0], on[0]) if len(on) == 1 else "+".join(on) or "none"
    if mode not in POOLING_MODES:
        raise ConfigError(
            f"embedding model: pooling {mode!r} in {where} is not supported by the onnx "
            'backend; set embedding.backend = "torch"'
        )
    return str(mode)


def read_layout(root: Path) -> ModelLayout:
    """Inspect a model folder; ConfigError if the onnx backend cannot reproduce it."""
    modules_file = root / "modules.json"
    transformer_dir, pooling, dimension = root, "mean", 0
    if modules_file.is_file():
        for module in _read_json(modules_file):
            kind = module.get("type", "")
            path = root / module.get("path", "")
            # Matched by class name: sentence-transformers has moved these between packages.
            short = kind.rsplit(".", 1)[-1]
            if short == "Transformer":
                transformer_dir = path
            elif short == "Pooling":
                config = _read_json(path / "config.json")
                pooling = _pooling_mode(config, path / "config.json")
                dimension = int(config.get("word_embedding_dimension", 0))
            elif short != "Normalize":
                # Dense layers and the like would need their own port; torch runs them all.
                raise ConfigError(
                    f"embedding model: module {kind} in {modules_file} is not supported by "
                    'the onnx backend; set embedding.backend = "torch"'
                )
    config_file = transformer_dir / "config.json"
    if not config_file.is_file() or not (transformer_dir / "tokenizer.json").is_file():
        raise ConfigError(
            f"embedding model: {transformer_dir} lacks config.json or tokenizer.json "
            "(not a sentence-transformers model folder)"
        )
    hf_config = _read_json(config_file)
    st_config_file = transformer_dir / "sentence_bert_config.json"
    st_config = _read_json(st_config_file) if st_config_file.is_file() else {}
    max_len = st_config.get("max_seq_length") or hf_config.get("max_position_embeddings") or 512
    return ModelLayout(
        root=root,
        transformer_dir=transformer_dir,
        max_seq_length=int(max_len),
        do_lower_case=bool(st_config.get("do_lower_case", False)),
        pooling=pooling,
        dimension=dimension or int(hf_config.get("hidden_size", 0)),
    )


def _sample_digest(path: Path) -> str:
    """Digest of the size plus four 1 MiB windows spread over the file.

    Hashing all of a large weights file would cost every query process a noticeable
    delay; any retrained or different model differs in these windows (or in size).
    """
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        for k in range(4):
            fh.seek(max(0, (size - _SAMPLE_WINDOW) * k // 3))
            h.update(fh.read(_SAMPLE_WINDOW))
    return h.hexdigest()


def cache_stem(layout: ModelLayout, name: str) -> str:
    """File stem for this model's export: readable name plus a content fingerprint."""
    h = hashlib.sha256(f"format={EXPORT_FORMAT};opset={OPSET}".encode())
    h.update((layout.transformer_dir / "config.json").read_bytes())
    weights = layout.transformer_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise ConfigError(f"embedding model: the onnx backend reads {WEIGHTS_FILE}, which "
                          f'{layout.transformer_dir} lacks; set embedding.backend = "torch"')
    h.update(weights.name.encode() + _sample_digest(weights).encode())
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name.rstrip("/\\")).name or "model")
    return f"{slug}-{h.hexdigest()[:16]}"


def cache_dir_path(configured: str) -> Path:
    """The configured cache folder, or ~/.cache/rag/onnx; created if missing."""
    path = Path(configured or "~/.cache/rag/onnx").expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"embedding.cache_dir: cannot create {path} ({exc.strerror})") from None
    return path


def export_transformer(layout: ModelLayout, dest: Path) -> None:
    """Write the model's transformer (token vectors out) as an ONNX file at dest."""
    config = _read_json(layout.transformer_dir / "config.json")
    log.info("building the ONNX graph of %s (once; cached at %s)", layout.root, dest)

    def write(tmp: Path) -> None:
        write_encoder(layout.transformer_dir, config, tmp)
        if load_session(tmp, threads=1) is None:
            raise ConfigError(f"embedding model: the ONNX graph of {layout.root} is not loadable")

    atomic_write(dest, write, mode=SHARED_FILE)


class _DropMessage(logging.Filter):
    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.getMessage()


def quantize_int8(src: Path, dest: Path) -> None:
    """Dynamic per-channel int8 quantisation of an exported model."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    log.info("quantising %s to int8 (once; cached at %s)", src, dest)

    def write(tmp: Path) -> None:
        # Its "consider pre-processing" hint is for static quantisation; the tool it
        # suggests fails on this graph's dynamic shapes anyway.
        hint = _DropMessage("pre-processing")
        logging.getLogger().addFilter(hint)
        try:
            quantize_dynamic(str(src), str(tmp), per_channel=True, weight_type=QuantType.QInt8)
        finally:
            logging.getLogger().removeFilter(hint)

    atomic_write(dest, write, mode=SHARED_FILE)


def load_session(path: Path, threads: int) -> onnxruntime.InferenceSession | None:
    """An onnxruntime session for path, or None if the file is missing or unusable."""
    import onnxruntime as ort

    if not path.is_file():
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # initializer-pruning notices are noise to users
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own unrelated classes
        log.warning("ONNX cache %s is unusable (%s); rebuilding it", path, exc)
        return None
    inputs = {i.name for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    if not {"input_ids", "attention_mask"} <= inputs <= set(INPUT_NAMES) or outputs != [
        OUTPUT_NAME
    ]:
        log.warning("ONNX cache %s has unexpected inputs/outputs; rebuilding it", path)
        return None
    return session


def open_session(
    layout: ModelLayout, name: str, cache_dir: Path, *, int8: bool, threads: int
) -> onnxruntime.InferenceSession:
    """Load the cached export (fp32 or int8), building whatever is missing or broken."""
    stem = cache_stem(layout, name)
    fp32 = cache_dir / f"{stem}.onnx"
    target = cache_dir / f"{stem}.int8.onnx" if int8 else fp32
    session = load_session(target, threads)
    if session is not None:
        return session
    if not int8 or load_session(fp32, threads=1) is None:
        export_transformer(layout, fp32)
    if int8:
        quantize_int8(fp32, target)
    session = load_session(target, threads)
    if session is None:
        raise ConfigError(f"embedding model: cannot load the ONNX export {target}")
    return session
