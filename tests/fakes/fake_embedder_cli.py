"""`python -m tests.fakes.fake_embedder_cli ARGS`: the `rag` command with the fake embedder.

For tests that must run the command as a separate process (stdio protocols, Ctrl-C) without
loading the real embedding model.
"""

from __future__ import annotations

from typing import Any

from rag.indexer import embedding
from rag.interfaces.cli.main import main


def _fake(*_args: Any, **_kwargs: Any) -> embedding.FakeEmbedder:
    return embedding.FakeEmbedder()


if __name__ == "__main__":
    embedding.make_embedder = _fake  # type: ignore[assignment]
    main()
