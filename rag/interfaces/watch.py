"""Watch mode (`rag index --watch`, `rag serve --watch`): re-index when the docs change.

Changes are debounced by watchfiles (a burst of saves is one re-index). Each re-index is the
ordinary incremental one, so it writes a complete new version and swaps it in atomically;
a change that leaves every docs file as it was (an editor's temp file) writes nothing.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag.core.config import Settings
from rag.core.errors import RagError

if TYPE_CHECKING:
    from rag.indexer.indexing import IndexReport

STEP_MS = 300  # quiet time that ends a burst of changes
DEBOUNCE_MS = 1600  # longest a burst is grouped before re-indexing anyway
IDLE_MS = 500  # how often an idle watcher looks at its stop event


def docs_filter(docs: Path, index: Path, extensions: list[str]) -> Callable[[Any, str], bool]:
    """Changes worth a look: docs files and folders, not hidden paths, not the index itself."""
    root, index_real = docs.resolve(), index.resolve()
    exts = tuple(e.lower() for e in extensions)

    def keep(_change: Any, path: str) -> bool:
        p = Path(path)
        if p == index_real or index_real in p.parents:
            return False  # an index inside the docs folder must not trigger itself
        try:
            parts = p.relative_to(root).parts
        except ValueError:
            parts = p.parts
        if any(part.startswith(".") for part in parts):
            return False
        return p.suffix == "" or p.name.lower().endswith(exts)  # "" : a folder moved or removed

    return keep


def watch_loop(
    docs: Path, index: Path, settings: Settings, reindex: Callable[[], IndexReport | None], *,
    on_update: Callable[[IndexReport], None], on_error: Callable[[str], None],
    ready: Callable[[], None] | None = None, stop: threading.Event | None = None,
) -> None:
    """Call ``reindex`` after each burst of changes until ``stop`` is set (or Ctrl-C).

    ``ready`` is called once the watcher is running; a check right after it catches what
    changed between the last index and the start of the watch.
    """
    from watchfiles import watch

    from rag.reader.formats import folder_formats

    watched = folder_formats(docs).extensions(settings.docs.extensions)
    started = False
    for changes in watch(docs, watch_filter=docs_filter(docs, index, watched),
                         debounce=DEBOUNCE_MS, step=STEP_MS, rust_timeout=IDLE_MS,
                         yield_on_timeout=True, stop_event=stop):
        if not started:
            started = True
            if ready is not None:
                ready()
        elif not changes:
            continue
        try:
            report = reindex()
        except (RagError, OSError) as exc:  # e.g. the folder is gone for a moment: keep watching
            on_error(str(exc))
            continue
        if report is not None and (report.added or report.changed or report.removed):
            on_update(report)  # not a re-index that found every file as it was


def watch_server(state: Any, ready: Callable[[], None] | None = None) -> Callable[[], None]:
    """`rag serve --watch`: a thread that re-indexes the served folder and swaps the pipeline.

    Returns the function that stops it. A re-index holds the server's re-index lock, so a
    `POST /index` meanwhile gets 409 as it would during another re-index.
    """
    from rag.indexer.folders import is_fresh, mark_fresh

    stop = threading.Event()

    def reindex() -> IndexReport | None:
        with state.reindex_lock:
            if is_fresh(state.docs, state.index_root, state.settings):
                return None
            report, _ = state.reindex(False)
            mark_fresh(state.index_root, state.settings, report.version)
            return report

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    thread = threading.Thread(
        target=watch_loop, name="rag-watch", daemon=True,
        args=(state.docs, state.index_root, state.settings, reindex),
        kwargs={"on_update": lambda r: log(f"re-indexed: {r.summary()}"),
                "on_error": lambda msg: log(f"warning: re-index failed: {msg}"),
                "ready": ready or (lambda: log(f"watching {state.docs} for changes")),
                "stop": stop},
    )
    thread.start()

    def stop_watching() -> None:
        stop.set()
        thread.join(timeout=5)

    return stop_watching


def watch_index(docs: Path, index: Path, settings: Settings,
                on_update: Callable[[IndexReport], None], say: Callable[[str], None]) -> None:
    """`rag index --watch`: re-index on change until Ctrl-C, which stops it cleanly (exit 0).

    Interrupting a re-index loses nothing: the previous version stays live until the new one
    is complete. Between re-indexes Ctrl-C only asks the watcher to stop, which it does at
    its next step: a KeyboardInterrupt raised inside watchfiles' native watcher left the
    process hanging at exit now and then.
    """
    from rag.indexer.embedding import make_embedder
    from rag.indexer.folders import update_index

    embedder = make_embedder(settings.embedding)
    stop, busy = threading.Event(), threading.Event()

    def interrupt(_signum: int, _frame: object) -> None:
        stop.set()
        if busy.is_set():  # a re-index: stop it now
            raise KeyboardInterrupt

    def reindex() -> IndexReport | None:
        busy.set()
        try:
            return update_index(docs, index, settings, embedder)
        finally:
            busy.clear()

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        watch_loop(docs, index, settings, reindex, on_update=on_update,
                   on_error=lambda msg: say(f"warning: re-index failed: {msg}"),
                   ready=lambda: say(f"watching {docs} for changes (Ctrl-C stops)"), stop=stop)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
    say("stopped")
