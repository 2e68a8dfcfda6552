"""The blind sets gate CI as the dev set does: no change may quietly lose what generalises.

``../shared/evals/blind/run.sh`` answers two sets nobody on the team has read and prints
aggregate figures only; this test compares them with ``reports/baseline-blind.json`` (the
same aggregates, committed) and fails when a figure moves the wrong way by more than its
tolerance. It never reads a case.

run.sh indexes each set's corpus into ``indexes/blind-<set>`` and re-indexes only what
changed. Before it runs, this test rebuilds those indexes with the code under test, every
file chunked afresh (so a chunking change is measured even where the index was already
there), with the real embedder's vectors remembered from earlier runs (tests/vector_memo.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag.core.config import DEFAULT_CONFIG, load_settings
from tests.conftest import CORPORA, REPO
from tests.vector_memo import Memos, remembered

RUN = CORPORA.parent / "evals" / "blind" / "run.sh"
BASELINE = REPO / "reports" / "baseline-blind.json"
HIGHER = ("sec_hit3", "must_inc", "cit_prec", "cit_rec", "abstain")
LOWER = ("false_ab",)


def parse(table: str) -> dict[str, dict[str, float]]:
    """run.sh's table: a header line, then one line of aggregates per set."""
    lines = [line.split() for line in table.strip().splitlines()]
    header = lines[0]
    out = {}
    for row in lines[1:]:
        if len(row) != len(header):
            raise AssertionError(f"run.sh printed an unexpected line: {' '.join(row)}")
        values = dict(zip(header, row, strict=True))
        out[values["set"]] = {k: float(values[k]) for k in (*HIGHER, *LOWER, "errors")}
    return out


def rebuild_indexes(memos: Memos) -> None:
    """Each set's index where run.sh looks for it (a set is a ``<set>.b64`` file there),
    built as run.sh's `rag eval` would build it: same config, environment and corpus."""
    from rag.indexer import embedding
    from rag.indexer.indexing import build_index

    config = REPO / DEFAULT_CONFIG
    settings = load_settings(config if config.is_file() else None)
    with remembered(memos):
        embedder = embedding.make_embedder(settings.embedding)
        for name in sorted(p.stem for p in RUN.parent.glob("*.b64")):
            build_index(CORPORA / name, REPO / "indexes" / f"blind-{name}", settings, embedder,
                        rebuild=True)


@pytest.mark.slow
@pytest.mark.skipif(not RUN.is_file(), reason="the blind sets are not beside this checkout")
def test_blind_sets_hold_their_baseline(memos: Memos) -> None:
    rebuild_indexes(memos)
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    done = subprocess.run(["bash", str(RUN), baseline["generator"]], cwd=REPO, text=True,
                          capture_output=True, timeout=1800, check=False,
                          env={"RAG": str(Path(sys.executable).with_name("rag")), **os.environ,
                               "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    now = parse(done.stdout)
    tolerance = baseline["tolerance"]
    for name, before in baseline["sets"].items():
        got = now[name]
        assert got["errors"] == 0, f"{name}: cases failed with an error"
        for key in HIGHER:
            assert got[key] >= before[key] - tolerance, (name, key, got[key], before[key])
        for key in LOWER:
            assert got[key] <= before[key] + tolerance, (name, key, got[key], before[key])
