"""What the indexer reads: regular files only, any name, hard links, files giving no chunks."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.indexer import common as index_core
from rag.indexer import indexing
from rag.indexer.indexing import build_index, embed_text
from rag.reader import chunking, walker
from rag.stores import folder as store


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail (rather than hang the suite) if indexing blocks on a file."""

    def hung(*_: object) -> None:
        raise TimeoutError("indexing blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _index(docs: Path, tmp_path: Path, settings, embedder):
    return build_index(docs, tmp_path / "index", settings, embedder)


def _newer_chunk_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the chunking rules changed: the shared chunking step and the folder writer
    (which re-derives old vectors' keys under them) both compare against them."""
    for module in (index_core, indexing):
        monkeypatch.setattr(module, "CHUNK_RULES", chunking.CHUNK_RULES + 1)


def _paths(tmp_path: Path) -> set[str]:
    return {c.source_path for c in store.load(tmp_path / "index").chunks}


def test_fifo_and_device_are_skipped_with_one_warning(docs, tmp_path, settings, embedder,
                                                      no_hang):
    os.mkfifo(docs / "pipe.md")  # nobody writes to it: a blocking read would wait forever
    (docs / "null.md").symlink_to("/dev/null")  # outside the root: skipped as a link
    report = _index(docs, tmp_path, settings, embedder)
    assert [w for w in report.warnings if "pipe.md" in w] == [
        "skipped pipe.md: not a regular file"]
    assert "pipe.md" not in _paths(tmp_path) and "install.md" in _paths(tmp_path)


def test_device_file_inside_the_docs_is_not_read(docs, tmp_path, settings, embedder, no_hang,
                                                 monkeypatch):
    # A device node cannot be made without privileges; a link to /dev/zero resolved inside
    # the root stands in for one (read without end, it would fill memory).
    real_root = docs.resolve()
    monkeypatch.setattr(walker, "follow_link", lambda link, root, name: link.resolve())
    monkeypatch.setattr(walker, "real_relative",
                        lambda path, root: "zero.md" if path.name == "zero.md"
                        else path.resolve().relative_to(real_root).as_posix())
    (docs / "zero.md").symlink_to("/dev/zero")
    report = _index(docs, tmp_path, settings, embedder)
    assert "skipped zero.md: not a regular file" in report.warnings


def test_file_name_that_is_not_utf8_is_skipped_and_the_rest_indexed(docs, tmp_path, settings,
                                                                   embedder):
    name = os.fsencode(docs) + b"/caf\xe9.md"
    with open(name, "wb") as fh:
        fh.write(b"# Cafe\n\nA page with a Latin-1 file name.\n")
    report = _index(docs, tmp_path, settings, embedder)
    assert "skipped caf\\xe9.md: file name is not valid UTF-8" in report.warnings
    assert "install.md" in _paths(tmp_path)
    assert all("Latin-1 file name" not in c.text for c in store.load(tmp_path / "index").chunks)


def _restricted(settings, patterns: dict[str, list[str]]):
    return settings.model_copy(update={"visibility": settings.visibility.model_copy(
        update={"groups_by_path": patterns})})


def test_hard_link_cannot_make_a_restricted_file_public(docs, tmp_path, settings, embedder):
    (docs / "internal").mkdir()
    (docs / "public").mkdir()
    secret = docs / "internal" / "plan.md"
    secret.write_text("# Plan\n\nThe launch date is secret.\n", encoding="utf-8")
    os.link(secret, docs / "public" / "plan.md")
    report = _index(docs, tmp_path, _restricted(settings, {"internal/*": ["staff"]}), embedder)
    chunks = [c for c in store.load(tmp_path / "index").chunks if "launch date" in c.text]
    assert [(c.source_path, c.visibility) for c in chunks] == [("internal/plan.md", ("staff",))]
    assert any("public/plan.md is a hard link to internal/plan.md" in w for w in report.warnings)


def test_hard_links_restricted_to_different_groups_are_left_out(docs, tmp_path, settings,
                                                                embedder):
    (docs / "a").mkdir()
    (docs / "b").mkdir()
    (docs / "a" / "x.md").write_text("# X\n\nOnly for both groups.\n", encoding="utf-8")
    os.link(docs / "a" / "x.md", docs / "b" / "x.md")
    patterns = {"a/*": ["staff"], "b/*": ["ops"]}
    report = _index(docs, tmp_path, _restricted(settings, patterns), embedder)
    assert not {"a/x.md", "b/x.md"} & _paths(tmp_path)
    assert any(w.startswith("skipped a/x.md: it is also b/x.md") for w in report.warnings)
    assert report.no_chunks.get("skipped (see warnings)") == 1


def test_summary_says_which_files_gave_no_chunks_and_why(docs, tmp_path, settings, embedder):
    (docs / "empty.md").write_bytes(b"")
    (docs / "meta.md").write_text("---\ntitle: Only metadata\n---\n", encoding="utf-8")
    (docs / "meta2.md").write_text("+++\ntitle = 'Also'\n+++\n\n", encoding="utf-8")
    (docs / "links.md").write_text("<!-- todo -->\n[a]: /a\n", encoding="utf-8")
    report = _index(docs, tmp_path, settings, embedder)
    assert report.no_chunks == {"empty": 1, "only front matter": 2,
                                "only comments, link definitions or markup": 1}
    assert report.summary().splitlines()[1] == (
        "4 files gave no chunks: 2 only front matter, 1 empty, "
        "1 only comments, link definitions or markup")
    again = _index(docs, tmp_path, settings, embedder)  # unchanged files: same report
    assert again.no_chunks == report.no_chunks


def test_changed_chunking_rules_rechunk_without_reembedding(docs, tmp_path, settings, embedder,
                                                            monkeypatch):
    first = _index(docs, tmp_path, settings, embedder)
    calls = embedder.calls
    _newer_chunk_rules(monkeypatch)
    again = _index(docs, tmp_path, settings, embedder)
    assert sorted(again.changed) == sorted(first.added) and again.chunks_embedded == 0
    assert embedder.calls == calls
    assert store.load(tmp_path / "index").manifest.chunk_rules == indexing.CHUNK_RULES


def test_text_embedded_differently_under_new_rules_is_embedded_again(docs, tmp_path, settings,
                                                                  embedder, monkeypatch):
    first = _index(docs, tmp_path, settings, embedder)
    shown = indexing.embed_text  # new rules show every chunk a little differently
    monkeypatch.setattr(indexing, "embed_text", lambda chunk: shown(chunk) + "\n(shown anew)")
    _newer_chunk_rules(monkeypatch)
    again = _index(docs, tmp_path, settings, embedder)
    assert again.chunks_embedded == again.chunks_total == first.chunks_total
    assert store.load(tmp_path / "index").vectors.ntotal == first.chunks_total


def test_an_index_that_recorded_no_embedded_text_is_re_embedded_under_new_rules(
        docs, tmp_path, settings, embedder, monkeypatch):
    first = _index(docs, tmp_path, settings, embedder)
    index = tmp_path / "index"
    manifest = store._read_current(index) / "manifest.json"
    data = json.loads(manifest.read_text())
    del data["embedded"]  # as written before the keys were recorded
    manifest.write_text(json.dumps(data))
    _newer_chunk_rules(monkeypatch)
    again = _index(docs, tmp_path, settings, embedder)
    assert again.chunks_embedded == first.chunks_total  # its vectors' text is unknown
    assert store.load(index).vectors.ntotal == first.chunks_total  # none left twice


def test_mdx_pages_are_indexed_without_their_markup(docs, tmp_path, settings, embedder):
    (docs / "tabs.mdx").write_text(
        "---\ntitle: Package managers\n---\nimport Tabs from '@theme/Tabs';\n\n<Tabs>\n"
        "<TabItem value=\"npm\">\n\nRun npm install to fetch the packages.\n\n</TabItem>\n"
        "</Tabs>\n", encoding="utf-8")
    _index(docs, tmp_path, settings, embedder)
    [page] = [c for c in store.load(tmp_path / "index").chunks if c.source_path == "tabs.mdx"]
    assert page.heading == "Package managers" and (page.start_line, page.end_line) == (9, 9)
    assert embed_text(page) == "Package managers\nRun npm install to fetch the packages."


def test_an_edit_reads_only_the_edited_files_chunks_for_their_text(docs, tmp_path, settings,
                                                                   embedder, monkeypatch):
    (docs / "guide.md").write_text("# Guide\n\nThe guide says how to start the server.\n",
                                   encoding="utf-8")
    first = _index(docs, tmp_path, settings, embedder)
    shown = indexing.embed_text
    read: list[str] = []
    monkeypatch.setattr(indexing, "embed_text", lambda c: read.append(c.source_path) or shown(c))
    unchanged = _index(docs, tmp_path, settings, embedder)
    assert read == [] and unchanged.chunks_embedded == 0
    assert unchanged.chunks_total == first.chunks_total
    # The same sentence under a renamed heading: its chunk id stays, its embedded text not.
    (docs / "guide.md").write_text("# Starting\n\nThe guide says how to start the server.\n",
                                   encoding="utf-8")
    edited = _index(docs, tmp_path, settings, embedder)
    assert set(read) == {"guide.md"} and edited.chunks_embedded == 1
    [chunk] = [c for c in store.load(tmp_path / "index").chunks if c.source_path == "guide.md"]
    assert chunk.heading == "Starting"
