"""A `rag index` killed with SIGKILL at any point leaves the previous index loadable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag.indexer.indexing import build_index
from rag.stores import folder as store

REPO = Path(__file__).resolve().parents[1]
# A real indexing process with a deterministic (optionally slow) embedder, killed with
# SIGKILL (as by a power cut or `kill -9`) at the point named by its fourth argument.
SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from rag.core.config import Settings
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.stores import folder as store
from rag.stores.lexical import LexicalIndex

def die(*args):
    os.kill(os.getpid(), signal.SIGKILL)

def then_die(function):
    def run(*args):
        function(*args)
        die()
    return run

crash_at = sys.argv[4]
if crash_at == "after_vectors":  # the new version's files written, all but its manifest
    LexicalIndex.save = then_die(LexicalIndex.save)
elif crash_at == "before_swap":  # the new version complete, CURRENT not yet changed
    store.switch_version = die
elif crash_at == "after_swap":  # CURRENT names the new version, old ones not yet dropped
    store.switch_version = then_die(store.switch_version)

class Slow(FakeEmbedder):
    def embed_batch(self, texts):
        time.sleep(float(sys.argv[3]))
        return super().embed_batch(texts)

settings = Settings()
settings.embedding.batch_size = 1
print("started", flush=True)
build_index(Path(sys.argv[1]), Path(sys.argv[2]), settings, Slow())
print("done", flush=True)
"""


def _run(docs: Path, index: Path, delay: float, crash_at: str = ""):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(docs), str(index), str(delay), crash_at],
        env=env, stdout=subprocess.PIPE, text=True)


def _snapshot(index: Path) -> set[tuple[str, int, int]]:
    version = store.load(index)
    assert version.vectors.ntotal == len(version.chunks)
    assert all(version.row_of(store.faiss_id(c.chunk_id)) is not None for c in version.chunks)
    return {(c.chunk_id, c.start_line, c.end_line) for c in version.chunks}


@pytest.fixture
def indexed(docs: Path, tmp_path: Path, settings, embedder):
    index = tmp_path / "index"
    build_index(docs, index, settings, embedder)
    before = _snapshot(index)
    (docs / "added.md").write_text("# Added\n\nA brand new page about tides.\n", encoding="utf-8")
    (docs / "faq.md").unlink()
    return docs, index, before


@pytest.mark.parametrize("point", ["after_vectors", "before_swap", "after_swap"])
def test_kill_at_named_points(indexed, point):
    docs, index, before = indexed
    proc = _run(docs, index, 0.0, crash_at=point)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    after = _snapshot(index)
    if point == "after_swap":
        assert after != before and any("added.md" in line for line in _paths(index))
    else:
        assert after == before
    # the next run recovers: lock released, half-written folders collected
    proc = _run(docs, index, 0.0)
    proc.wait(timeout=60)
    assert proc.returncode == 0
    assert not list(index.glob(".tmp-*"))
    assert "added.md" in _paths(index) and "faq.md" not in _paths(index)


def _paths(index: Path) -> set[str]:
    return {c.source_path for c in store.load(index).chunks}


@pytest.mark.parametrize("delay_s", [0.2, 0.6, 1.0])
def test_kill_from_outside_mid_run(indexed, delay_s):
    docs, index, before = indexed
    proc = _run(docs, index, 0.02)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    after = _snapshot(index)  # loadable and consistent: either the old or the new version
    assert after == before or "added.md" in _paths(index)


def test_the_next_run_removes_what_a_swap_killed_midway_left(indexed, settings, embedder):
    docs, index, _ = indexed
    stale = index / ".CURRENT.0123456789ab.tmp"  # a swap's temporary file, never renamed
    stale.write_text("v-half", encoding="utf-8")
    build_index(docs, index, settings, embedder)
    assert not stale.exists()
    assert "added.md" in _paths(index)
