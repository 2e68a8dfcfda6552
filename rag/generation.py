"""Generation stage: a question and labelled Evidence in, the chosen backend's answer out.

Imports point one way: this module -> the backends -> rag.generator_base, whose types
every backend returns. The answer types and the OpenAI backend's prompt, schema and parser
stay importable from here for callers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag.errors import ConfigError
from rag.generator_base import GenerationResult, Generator, ModelAnswer, ModelStatement
from rag.openai_generator import (
    RULES,
    AnswerFormatError,
    OpenAIGenerator,
    UnknownLabelError,
    answer_schema,
    build_prompt,
    parse_answer,
)

if TYPE_CHECKING:
    from rag.config import Settings
    from rag.embedding import Embedder

__all__ = ["RULES", "AnswerFormatError", "GenerationResult", "Generator", "ModelAnswer",
           "ModelStatement", "OpenAIGenerator", "UnknownLabelError", "answer_schema",
           "build_prompt", "make_generator", "parse_answer"]


def make_generator(
    settings: Settings, name: str | None = None, *, embedder: Embedder | None = None
) -> Generator:
    """Build the generator named in config (or ``name``); close() it when done if it has one.

    ``embedder`` lets the extractive generator score sentences by meaning, not words only.
    """
    gen = settings.generation
    name = name or gen.generator
    if name == "extractive":
        from rag.extractive import ExtractiveGenerator

        return ExtractiveGenerator(embedder)
    if name == "passage":
        from rag.passage import PassageGenerator

        return PassageGenerator()
    if name == "openai":
        return OpenAIGenerator(gen)
    if name == "local":
        from rag.local_model import LocalGenerator

        return LocalGenerator(gen)
    raise ConfigError(f"unknown generator {name!r} (choose local, openai, extractive or passage)")
