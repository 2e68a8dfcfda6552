"""Docs question answering whose every citation is verified: the library API.

    import rag

    rag.index("docs", "indexes/default")             # -> IndexReport
    hits = rag.search("How do I add a route?", docs="docs")
    answer = rag.ask("How do I add a route?", docs="docs")
    for statement in answer.statements:
        print(statement.text, [f"{c.source_path}:{c.start_line}" for c in statement.citations])
    checks = rag.verify(answer, docs="docs")         # each citation: exact, moved, changed, gone
    for sentence in rag.check("Drafts are not built.", docs="docs"):
        print(sentence.status, sentence.text)        # supported, conflicting or not_found

Each call takes ``index=`` (an index folder) and/or ``docs=`` (a docs folder). With ``docs``
and no index, the folder gets an index of its own in the user's cache, brought up to date
first, as ``rag ask --docs`` does. ``settings`` is a :class:`Settings` (``rag.settings()``
loads ``configs/default.toml``, a file you name, and ``RAG_*`` environment overrides).
``groups`` are the reader's visibility groups: a restricted file is never searched, quoted
or read for anyone outside them.

Failures raise :class:`RagError` subclasses (``rag.core.errors``); the command line maps each
to one line and an exit code. The stages themselves are subpackages, lowest first: ``core``,
``reader``, ``stores``, ``indexer``, ``retriever``, ``verifier``, ``answer``, ``generator``;
then ``pipeline`` joins them, and ``eval`` and ``interfaces`` (CLI, HTTP, MCP) sit on top.
Importing ``rag`` loads none of them: each call imports what it needs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag.core.config import Settings
    from rag.core.records import Answer, SearchHit
    from rag.indexer.folders import Target
    from rag.indexer.indexing import IndexReport
    from rag.verifier.check import SentenceCheck
    from rag.verifier.reverify import Recheck

__all__ = ["ask", "check", "index", "search", "settings", "verify"]

log = logging.getLogger("rag")
PathLike = str | Path
Warn = Callable[[str], None]


def settings(config: PathLike | None = None) -> Settings:
    """The settings: ``configs/default.toml``, or the file ``config``, then ``RAG_*`` overrides."""
    from rag.core.config import load_settings

    return load_settings(Path(config) if config is not None else None)


def index(docs: PathLike, index_dir: PathLike | None = None, *,
          settings: Settings | None = None, rebuild: bool = False,
          progress: bool = False) -> IndexReport:
    """Build the index of ``docs``, or bring it up to date (only changed files are re-read).

    ``index_dir`` defaults to ``indexes/default``. A crash leaves the previous version live.
    ``rebuild`` re-embeds everything; ``progress`` shows embedding progress on stderr.
    """
    from rag.core.config import DEFAULT_INDEX
    from rag.core.paths import check_index_path
    from rag.indexer.folders import mark_fresh
    from rag.indexer.indexing import run_index

    chosen = _settings(settings)
    where = check_index_path(Path(index_dir) if index_dir is not None else DEFAULT_INDEX)
    report = run_index(Path(docs), where, chosen, rebuild=rebuild, show_progress=progress)
    mark_fresh(where, chosen, report.version)
    return report


def search(query: str, *, index: PathLike | None = None, docs: PathLike | None = None,
           settings: Settings | None = None, mode: str | None = None, k: int | None = None,
           groups: Iterable[str] = (), progress: bool = False,
           on_warning: Warn | None = None) -> list[SearchHit]:
    """Ranked Search Hits for ``query`` (``mode``: dense, lexical or hybrid), no model.

    ``progress`` shows a bar while a ``docs`` folder is indexed first; ``on_warning`` is told
    each warning of that indexing (default: the ``rag`` logger).
    """
    from rag.pipeline import open_retriever

    chosen = _settings(settings)
    target = _target(index, docs, chosen, progress, on_warning)
    retriever = open_retriever(target.index, chosen, target.embedder)
    return retriever.search(query, k=k, mode=mode, groups=frozenset(groups))


def ask(question: str, *, index: PathLike | None = None, docs: PathLike | None = None,
        settings: Settings | None = None, generator: str | None = None,
        mode: str | None = None, groups: Iterable[str] = (), progress: bool = False,
        on_warning: Warn | None = None) -> Answer:
    """An Answer whose every citation was checked in code; ``insufficient_evidence`` when
    the docs shown do not answer. ``generator``: extractive (default), passage, local, openai.
    ``progress`` and ``on_warning``: as for :func:`search`.
    """
    from rag.pipeline import Pipeline, open_retriever

    chosen = _settings(settings)
    target = _target(index, docs, chosen, progress, on_warning)
    retriever = open_retriever(target.index, chosen, target.embedder)
    with Pipeline(target.index, chosen, generator=generator, retriever=retriever) as pipeline:
        return pipeline.ask(question, mode=mode, groups=frozenset(groups))


def verify(answer: Answer | dict[str, Any] | PathLike, *, docs: PathLike | None = None,
           index: PathLike | None = None, settings: Settings | None = None) -> list[Recheck]:
    """Re-check a saved answer's citations against the docs as they are now.

    ``answer`` is an Answer, its JSON (``rag ask --json``) as a dict, or a path to that JSON.
    Each Recheck says exact, moved (same text, other lines), changed or gone. The folder read
    is ``docs``, else the one ``index`` was built from; a ``docs_root`` saved in the answer is
    only followed where this user's cache indexed that folder.
    """
    from rag.core.config import DEFAULT_INDEX
    from rag.core.records import Answer as AnswerRecord
    from rag.verifier.reverify import answer_json, load_answer_file, recheck

    chosen = _settings(settings)
    if isinstance(answer, AnswerRecord):
        data = json.loads(json.dumps(answer_json(answer, Path(docs) if docs else None)))
    elif isinstance(answer, dict):
        data = answer
    else:
        data = load_answer_file(Path(answer), chosen)
    where = Path(index) if index is not None else DEFAULT_INDEX
    return recheck(data, Path(docs) if docs is not None else None, where, chosen)[1]


def check(text: str, *, index: PathLike | None = None, docs: PathLike | None = None,
          settings: Settings | None = None, mode: str | None = None,
          groups: Iterable[str] = (), progress: bool = False,
          on_warning: Warn | None = None) -> list[SentenceCheck]:
    """Check any text against the docs, sentence by sentence: each is ``supported`` (with
    the lines that back it), ``conflicting`` (the closest lines state another number,
    version, identifier or the opposite; both shown) or ``not_found``, with its reason.

    Sentences are looked up as :func:`search` would, so a file restricted to other
    ``groups`` never backs one. Headings, code and sentences of fewer than two content
    words are not checked: a text of nothing else gives an empty list.
    """
    from rag.pipeline import open_retriever
    from rag.verifier.check import check_text

    chosen = _settings(settings)
    target = _target(index, docs, chosen, progress, on_warning)
    retriever = open_retriever(target.index, chosen, target.embedder)
    return check_text(text, retriever, target.docs, mode=mode, groups=frozenset(groups),
                      threshold=chosen.verification.check_threshold)


def _settings(given: Settings | None) -> Settings:
    return given if given is not None else settings()


def _target(index: PathLike | None, docs: PathLike | None, chosen: Settings,
            progress: bool = False, on_warning: Warn | None = None) -> Target:
    from rag.indexer.folders import resolve

    return resolve(Path(index) if index is not None else None,
                   Path(docs) if docs is not None else None, chosen,
                   show_progress=progress, warn=on_warning or log.warning)
