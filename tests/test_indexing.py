"""Indexer: incremental re-indexing, storage, bad input (fake embedder, tiny corpus)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rag.core.config import Settings
from rag.core.errors import IndexingError
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index, embed_text
from rag.reader.chunking import parse_document, span_text
from rag.retriever.retrieval import Retriever
from rag.stores import folder as store


def _index(docs: Path, tmp_path: Path, settings: Settings, embedder: FakeEmbedder, **kw):
    return build_index(docs, tmp_path / "index", settings, embedder, **kw)


def _assert_consistent(index_root: Path, docs: Path) -> store.IndexVersion:
    """Every chunk's lines equal the file's lines, and vectors match chunks one to one."""
    version = store.load(index_root)
    assert version.vectors.ntotal == len(version.chunks)
    ids = {c.chunk_id for c in version.chunks}
    assert len(ids) == len(version.chunks)
    files: dict[str, list[str]] = {}
    for chunk in version.chunks:
        if chunk.source_path not in files:
            text = (docs / chunk.source_path).read_bytes().decode("utf-8-sig")
            files[chunk.source_path] = parse_document(text).lines
        lines = files[chunk.source_path]
        assert span_text(lines, chunk.start_line, chunk.end_line, chunk.start_col,
                         chunk.end_col) == chunk.text
        assert version.row_of(store.faiss_id(chunk.chunk_id)) is not None
    files = {c.source_path for c in version.chunks}
    assert files <= set(version.manifest.files)
    return version


def test_first_build_then_noop(docs, tmp_path, settings, embedder):
    first = _index(docs, tmp_path, settings, embedder)
    assert len(first.added) == len(list(docs.rglob("*.md")))
    assert first.chunks_embedded == first.chunks_total == embedder.calls > 0
    second = _index(docs, tmp_path, settings, embedder)
    assert second.chunks_embedded == 0 and embedder.calls == first.chunks_total
    assert len(second.unchanged) == len(first.added)
    _assert_consistent(tmp_path / "index", docs)


def test_edit_one_paragraph_embeds_only_changed_chunks(docs, tmp_path, settings, embedder):
    _index(docs, tmp_path, settings, embedder)
    before = {c.chunk_id: c for c in store.load(tmp_path / "index").chunks}
    target = docs / "troubleshooting.md"
    text = target.read_text(encoding="utf-8")
    lines = text.split("\n")
    # change one non-heading body line
    idx = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")
               and i > 3)
    lines[idx] = lines[idx] + " Restart the service afterwards."
    target.write_text("\n".join(lines), encoding="utf-8")
    calls = embedder.calls
    report = _index(docs, tmp_path, settings, embedder)
    after = store.load(tmp_path / "index").chunks
    new_ids = [c.chunk_id for c in after if c.chunk_id not in before]
    assert report.changed == ["troubleshooting.md"]
    assert report.chunks_embedded == embedder.calls - calls == len(new_ids) == 1
    assert all(c.source_path == "troubleshooting.md" for c in after if c.chunk_id in new_ids)
    _assert_consistent(tmp_path / "index", docs)


def test_moved_lines_keep_vectors_and_update_ranges(docs, tmp_path, settings, embedder):
    _index(docs, tmp_path, settings, embedder)
    target = docs / "install.md"
    old = {c.text: c for c in store.load(tmp_path / "index").chunks if c.source_path == "install.md"}
    target.write_text("\n\n\n" + target.read_text(encoding="utf-8"), encoding="utf-8")
    report = _index(docs, tmp_path, settings, embedder)
    assert report.changed == ["install.md"] and report.chunks_embedded == 0
    version = _assert_consistent(tmp_path / "index", docs)
    moved = [c for c in version.chunks if c.source_path == "install.md"]
    assert moved and all(c.start_line == old[c.text].start_line + 3 for c in moved)


def test_delete_and_rename(docs, tmp_path, settings, embedder):
    _index(docs, tmp_path, settings, embedder)
    (docs / "faq.md").unlink()
    (docs / "install.md").rename(docs / "setup.md")
    calls = embedder.calls
    report = _index(docs, tmp_path, settings, embedder)
    assert sorted(report.removed) == ["faq.md", "install.md"]
    assert report.renamed == [("install.md", "setup.md")]
    assert embedder.calls == calls  # a rename costs no embedding
    version = _assert_consistent(tmp_path / "index", docs)
    paths = {c.source_path for c in version.chunks}
    assert "faq.md" not in paths and "install.md" not in paths and "setup.md" in paths
    retriever = Retriever(version, embedder, settings.retrieval)
    for mode in ("dense", "lexical", "hybrid"):
        hits = retriever.search("frequently asked questions install", mode=mode, k=50)
        assert not {h.chunk.source_path for h in hits} & {"faq.md", "install.md"}


def test_heading_rename_reembeds_unchanged_body(docs, tmp_path, settings, embedder):
    _index(docs, tmp_path, settings, embedder)
    target = docs / "troubleshooting.md"
    text = target.read_text(encoding="utf-8")
    first_h2 = next(line for line in text.split("\n") if line.startswith("## "))
    target.write_text(text.replace(first_h2, first_h2 + " (renamed)", 1), encoding="utf-8")
    report = _index(docs, tmp_path, settings, embedder)
    assert report.chunks_embedded >= 1  # the heading is part of what is embedded
    version = _assert_consistent(tmp_path / "index", docs)
    renamed = [c for c in version.chunks if c.heading and "(renamed)" in c.heading]
    assert renamed
    vec = version.vectors.reconstruct(store.faiss_id(renamed[0].chunk_id))
    assert np.allclose(vec, embedder.embed_batch([embed_text(renamed[0])])[0])


def test_rebuild_reembeds_everything(docs, tmp_path, settings, embedder):
    first = _index(docs, tmp_path, settings, embedder)
    again = _index(docs, tmp_path, settings, embedder, rebuild=True)
    assert again.chunks_embedded == first.chunks_total


def test_other_model_is_refused_with_rebuild_hint(docs, tmp_path, settings, embedder):
    _index(docs, tmp_path, settings, embedder)
    with pytest.raises(IndexingError, match="embedding_model.*--rebuild"):
        _index(docs, tmp_path, settings, FakeEmbedder(name="other-model"))
    with pytest.raises(Exception, match="rebuild"):
        Retriever(store.load(tmp_path / "index"), FakeEmbedder(name="other-model"),
                  settings.retrieval)
    changed = settings.model_copy(update={"chunking": settings.chunking.model_copy(
        update={"max_tokens": 100})})
    with pytest.raises(IndexingError, match="chunking"):
        _index(docs, tmp_path, changed, embedder)
    report = _index(docs, tmp_path, changed, FakeEmbedder(name="other-model"), rebuild=True)
    assert report.chunks_total > 0


def test_missing_folder_and_missing_index(tmp_path, settings, embedder):
    with pytest.raises(IndexingError, match="does not exist"):
        build_index(tmp_path / "nope", tmp_path / "index", settings, embedder)
    with pytest.raises(IndexingError, match="no index at"):
        store.load(tmp_path / "index")


def test_bad_files_warn_and_the_rest_is_indexed(docs, tmp_path, settings, embedder):
    (docs / "latin1.md").write_bytes("# Caf\xe9\n\nna\xefve text\n".encode("latin-1"))
    (docs / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "empty.md").write_bytes(b"")
    (docs / "huge.md").write_text("word " * 1_000_000, encoding="utf-8")  # 5 MB, one line
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n\noutside the docs root\n", encoding="utf-8")
    (docs / "escape.md").symlink_to(outside)
    report = _index(docs, tmp_path, settings, embedder)
    joined = "\n".join(report.warnings)
    assert "latin1.md: not valid UTF-8 (byte 5); save it as UTF-8" in joined
    assert "image.md: binary file" in joined
    assert "empty.md is empty" in joined
    assert "loop: " in joined and "escape.md: symlink points outside" in joined
    version = _assert_consistent(tmp_path / "index", docs)
    paths = {c.source_path for c in version.chunks}
    assert "troubleshooting.md" in paths and "huge.md" in paths
    assert not {"latin1.md", "image.md", "escape.md"} & paths
    assert all("outside the docs root" not in c.text for c in version.chunks)


def test_unreadable_file_is_skipped(docs, tmp_path, settings, embedder, monkeypatch):
    secret = docs / "secret.md"
    secret.write_text("# Secret\n\ntext\n", encoding="utf-8")
    secret.chmod(0o000)
    if os.geteuid() == 0:  # root reads anything: make the open fail as it would for a user
        real = os.open

        def deny(path, flags, *args, **kwargs):
            if os.fspath(path).endswith("secret.md"):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", deny)
    report = _index(docs, tmp_path, settings, embedder)
    assert "skipped secret.md: permission denied" in report.warnings
    assert report.chunks_total > 0


def test_visibility_from_config_changes_without_reembedding(docs, tmp_path, settings, embedder):
    _index(docs, tmp_path, settings, embedder)
    calls = embedder.calls
    staff = settings.model_copy(update={"visibility": settings.visibility.model_copy(
        update={"groups_by_path": {"faq.md": ["staff"]}})})
    _index(docs, tmp_path, staff, embedder)
    assert embedder.calls == calls
    version = store.load(tmp_path / "index")
    faq = [c for c in version.chunks if c.source_path == "faq.md"]
    assert faq and all(c.visibility == ("staff",) for c in faq)
    retriever = Retriever(version, embedder, settings.retrieval)
    public = retriever.search("Tidewatch free license", mode="lexical", k=50)
    assert all(h.chunk.source_path != "faq.md" for h in public)
    assert any(h.chunk.source_path == "faq.md"
               for h in retriever.search("Tidewatch free license", mode="lexical", k=50,
                                              groups={"staff"}))


def test_old_versions_are_collected(docs, tmp_path, settings, embedder):
    for _ in range(4):
        _index(docs, tmp_path, settings, embedder, rebuild=True)
    versions = [p for p in (tmp_path / "index").iterdir() if p.name.startswith("v-")]
    assert len(versions) == store.KEEP_VERSIONS
    live = (tmp_path / "index" / store.CURRENT).read_text().strip()
    assert live in {p.name for p in versions}
