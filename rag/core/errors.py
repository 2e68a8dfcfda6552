"""One small exception tree; the CLI maps each class to one line and an exit code."""


class RagError(Exception):
    """Base class: a failure the user can act on, reported as one line."""

    exit_code = 3


class UsageError(RagError):
    """A command-line argument that cannot be used (an empty question, ``-k 0``)."""

    exit_code = 2


class ConfigError(RagError):
    exit_code = 4


class IndexingError(RagError):
    exit_code = 5


class IndexBusyError(IndexingError):
    """Another process is writing this index right now."""


class RetrievalError(RagError):
    exit_code = 6


class GenerationError(RagError):
    exit_code = 7


class ModelOutputError(GenerationError):
    """The model answered, but never with a usable answer (cut off, not the answer format);
    with ``verification.extractive_fallback`` an extractive answer stands in."""


class CitationError(RagError):
    exit_code = 8


class AccessError(RagError):
    """A path outside the allowed roots, or a Source the user may not see."""

    exit_code = 9


# Exit codes that are outcomes, not errors (grep-like: 0 answered, 1 nothing to answer with).
EXIT_ANSWERED = 0
EXIT_INSUFFICIENT = 1
EXIT_INTERRUPTED = 130
# Outcomes of the checks: `rag verify` (some citation no longer matches the docs) and
# `rag check` (some sentence is not supported by them) exit with a citation error's code.
EXIT_NOT_VERIFIED = CitationError.exit_code
