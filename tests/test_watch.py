"""Watch mode: an edit in the docs reaches the next search without anyone re-indexing."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.core.config import Settings
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.folders import update_index
from rag.indexer.indexing import build_index
from rag.interfaces.http.server import create_app
from rag.interfaces.watch import docs_filter, watch_loop, watch_server
from rag.pipeline import open_retriever
from rag.stores import folder as store
from tests.conftest import REPO

WAIT_S = 60  # an upper bound for the watcher to react, never an expected duration
NEW_TEXT = "# FAQ\n\nThe quokka mascot is called Quinn.\n"


def edit(path: Path, text: str) -> None:
    """Save as editors do: write a temp file, then rename it over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def top_path(index: Path, settings: Settings, embedder: FakeEmbedder, query: str) -> str | None:
    hits = open_retriever(index, settings, embedder).search(query, mode="lexical", k=1)
    return hits[0].chunk.source_path if hits else None


def test_filter_ignores_the_index_hidden_and_other_files(tmp_path: Path):
    docs, index = tmp_path / "docs", tmp_path / "docs" / "indexes" / "default"
    keep = docs_filter(docs, index, [".md"])
    assert keep(None, str(docs / "guide" / "a.md"))
    assert keep(None, str(docs / "guide"))  # a folder moved or removed
    assert not keep(None, str(index / "CURRENT"))
    assert not keep(None, str(index / "v-1" / "chunks.jsonl"))
    assert not keep(None, str(docs / ".git" / "index"))
    assert not keep(None, str(docs / "a.md.swp"))


def test_watch_loop_reindexes_after_an_edit(docs: Path, tmp_path: Path, settings: Settings,
                                            embedder: FakeEmbedder):
    index = tmp_path / "index"
    build_index(docs, index, settings, embedder)
    assert top_path(index, settings, embedder, "quokka") is None
    ready, stop, reports = threading.Event(), threading.Event(), queue.Queue()
    thread = threading.Thread(target=watch_loop, args=(
        docs, index, settings, lambda: update_index(docs, index, settings, embedder)),
        kwargs={"on_update": reports.put, "on_error": reports.put, "ready": ready.set,
                "stop": stop})
    thread.start()
    try:
        assert ready.wait(WAIT_S)
        edit(docs / "faq.md", NEW_TEXT)
        report = reports.get(timeout=WAIT_S)
        assert report.changed == ["faq.md"] and report.chunks_embedded == 1
        assert top_path(index, settings, embedder, "quokka") == "faq.md"
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert not thread.is_alive()


def test_serve_watch_swaps_in_the_new_index(docs: Path, tmp_path: Path, settings: Settings,
                                            embedder: FakeEmbedder):
    build_index(docs, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder)
    ready = threading.Event()
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        def paths() -> list[str]:
            resp = client.get("/search", params={"q": "quokka", "mode": "lexical"})
            return [h["source_path"] for h in resp.json()["hits"]]

        version = client.get("/health").json()["version"]
        stop = watch_server(app.state.rag, ready=ready.set)
        try:
            assert ready.wait(WAIT_S) and paths() == []
            edit(docs / "faq.md", NEW_TEXT)
            wait_until(lambda: paths()[:1] == ["faq.md"], "the edit to reach /search")
            assert client.get("/health").json()["version"] != version
            answer = client.post("/ask", json={"question": "What is the quokka mascot called?"})
            assert any("Quinn" in s["text"] for s in answer.json()["statements"])
        finally:
            stop()


def test_index_watch_command_reindexes_and_stops_on_ctrl_c(docs: Path, tmp_path: Path):
    index = tmp_path / "index"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.fake_embedder_cli", "index", str(docs),
         "--index", str(index), "--watch"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: dict[str, queue.Queue[str]] = {"out": queue.Queue(), "err": queue.Queue()}
    seen_err: list[str] = []

    def read(name: str, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines[name].put(line)
            if name == "err":
                seen_err.append(line)

    readers = [threading.Thread(target=read, args=("out", proc.stdout)),
               threading.Thread(target=read, args=("err", proc.stderr))]
    for reader in readers:
        reader.start()

    def next_line(name: str, needle: str) -> str:
        deadline = time.monotonic() + WAIT_S
        while True:
            line = lines[name].get(timeout=max(0.1, deadline - time.monotonic()))
            if needle in line:
                return line

    try:
        assert "7 added" in next_line("out", "files:")
        next_line("err", "watching")
        live = (index / store.CURRENT).read_text()
        edit(docs / "faq.md", NEW_TEXT)
        assert "1 changed" in next_line("out", "files:")
        assert (index / store.CURRENT).read_text() != live
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_S) == 0
        for reader in readers:
            reader.join(WAIT_S)
        assert seen_err[-1].strip() == "stopped"  # one line, no traceback
        assert not any("Traceback" in line for line in seen_err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
