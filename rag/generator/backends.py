"""Generation stage: a question and labelled Evidence in, the chosen backend's answer out.

Backends are chosen by name through GENERATORS; each factory imports its backend only when
it is chosen (the OpenAI one comes with this module, for the names below; it imports the
openai client itself only when built). Imports point one way: this module -> the backends
-> rag.generator.base, whose types every backend returns. The answer types and the OpenAI
backend's prompt, schema and parser stay importable from here for callers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rag.core.errors import ConfigError
from rag.generator.base import GenerationResult, Generator, ModelAnswer, ModelStatement
from rag.generator.openai_compat import (
    RULES,
    AnswerFormatError,
    OpenAIGenerator,
    UnknownLabelError,
    answer_schema,
    build_prompt,
    parse_answer,
)

if TYPE_CHECKING:
    from rag.core.config import GenerationSettings, Settings
    from rag.indexer.embedding import Embedder

__all__ = ["GENERATORS", "RULES", "AnswerFormatError", "GenerationResult", "Generator",
           "ModelAnswer", "ModelStatement", "OpenAIGenerator", "UnknownLabelError",
           "answer_schema", "build_prompt", "make_generator", "parse_answer"]

Factory = Callable[["GenerationSettings", "Embedder | None"], Generator]


def _local(gen: GenerationSettings, embedder: Embedder | None) -> Generator:
    from rag.generator.local.model import LocalGenerator

    return LocalGenerator(gen)


def _openai(gen: GenerationSettings, embedder: Embedder | None) -> Generator:
    return OpenAIGenerator(gen)


def _extractive(gen: GenerationSettings, embedder: Embedder | None) -> Generator:
    from rag.generator.extractive import ExtractiveGenerator

    return ExtractiveGenerator(embedder)


def _passage(gen: GenerationSettings, embedder: Embedder | None) -> Generator:
    from rag.generator.passage import PassageGenerator

    return PassageGenerator()


# name -> factory(generation settings, embedder or None); the order is the one errors list.
GENERATORS: dict[str, Factory] = {
    "local": _local, "openai": _openai, "extractive": _extractive, "passage": _passage,
}


def make_generator(
    settings: Settings, name: str | None = None, *, embedder: Embedder | None = None
) -> Generator:
    """Build the generator named in config (or ``name``); close() it when done if it has one.

    ``embedder`` lets the extractive generator score sentences by meaning, not words only.
    """
    gen = settings.generation
    name = name or gen.generator
    factory = GENERATORS.get(name)
    if factory is None:
        *others, last = GENERATORS
        raise ConfigError(f"unknown generator {name!r} (choose {', '.join(others)} or {last})")
    return factory(gen, embedder)
