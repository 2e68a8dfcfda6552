"""`rag index` progress: the total is known from the start, files are counted as the summary
counts them, and a log (stderr not a terminal) gets plain lines while embedding."""

from __future__ import annotations

import io
from pathlib import Path

from rag.core.progress import PlainProgress, eta, index_progress
from rag.indexer.indexing import build_index


def test_total_and_files_are_known_before_the_first_batch(docs: Path, tmp_path: Path,
                                                          settings, embedder) -> None:
    (docs / "only-front-matter.md").write_text("---\ntitle: x\n---\n", encoding="utf-8")
    calls: list[tuple[int, int, int]] = []
    report = build_index(docs, tmp_path / "idx", settings, embedder,
                         progress=lambda *a: calls.append(a))
    assert calls[0] == (0, report.chunks_embedded, calls[0][2])
    assert calls[-1][0] == calls[-1][1] == report.chunks_embedded
    files = len(report.added) + len(report.changed)
    assert {c[2] for c in calls} == {files}  # what the summary calls added + changed
    assert report.no_chunks  # a file without chunks is still one of the summary's files


def test_plain_lines_every_tenth_every_interval_and_at_the_end() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = PlainProgress(out, every_s=10, clock=lambda: now[0])
    for done, t in [(0, 1), (50, 3), (120, 5), (150, 8), (160, 19), (170, 20), (1000, 34)]:
        now[0] = t
        progress(done, 1000, 12)
    assert out.getvalue().splitlines() == [
        "embedding: 0/1000 chunks from 12 files, 1 s",
        "embedding: 120/1000 chunks from 12 files, 5 s",  # passed 10 %
        "embedding: 160/1000 chunks from 12 files, 19 s",  # 10 s since the last line
        "embedding: 1000/1000 chunks from 12 files, 34 s",
    ]


def test_without_a_terminal_the_callback_writes_plain_lines(capsys) -> None:
    with index_progress(terminal=False) as progress:
        progress(0, 40, 1)
        progress(40, 40, 1)
    err = capsys.readouterr().err
    assert err.startswith("embedding: 0/40 chunks from 1 file, ")
    assert "\x1b" not in err and err.count("\n") == 2


def test_eta_from_the_average_rate() -> None:
    assert eta(0, 100, 5.0) == "-"
    assert eta(25, 100, 30.0) == "0:01:30"
    assert eta(1, 4000, 1.0) == "1:06:39"


def test_rag_index_in_a_log_says_progress_with_the_summarys_file_count(
        docs: Path, tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from rag.indexer.embedding import FakeEmbedder
    from rag.interfaces.cli.main import app

    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda *_a, **_k: FakeEmbedder())
    result = CliRunner().invoke(app, ["index", str(docs), "--index", str(tmp_path / "idx")])
    assert result.exit_code == 0, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("embedding: ")]
    added = int(result.stdout.split("files: ")[1].split(" added")[0])
    assert lines[0].startswith("embedding: 0/") and f"from {added} files" in lines[0]
    done, total = lines[-1].split()[1].split("/")
    assert done == total and f"{total} embedded" in result.stdout
