"""Indexer: docs folder -> chunks -> vectors, re-doing only what changed.

A file whose bytes are unchanged is neither re-chunked nor re-embedded. A chunk whose embedded
text is unchanged keeps its vector even when its lines moved or its file was renamed, because
vectors are looked up by the hash of the text that was embedded.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from rag import store
from rag.chunking import chunk_document, parse_document, source_id_for
from rag.config import Settings
from rag.embedding import Embedder
from rag.errors import AccessError, IndexingError
from rag.paths import follow_link, real_relative
from rag.records import Chunk
from rag.visibility import UnclearVisibility, read_visibility

EMBED_WINDOW_BATCHES = 8  # batches per embed_batch call (see _embed)
Progress = Callable[[int, int, int], None]  # (chunks embedded, chunks to embed, files)


@dataclass
class IndexReport:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path)
    warnings: list[str] = field(default_factory=list)
    chunks_total: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    seconds: float = 0.0
    version: str = ""

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "renamed": [list(pair) for pair in self.renamed]}

    def summary(self) -> str:
        renamed = f" ({len(self.renamed)} renamed)" if self.renamed else ""
        return (
            f"files: {len(self.added)} added, {len(self.changed)} changed, "
            f"{len(self.removed)} removed, {len(self.unchanged)} unchanged{renamed}; "
            f"chunks: {self.chunks_embedded} embedded, {self.chunks_reused} reused, "
            f"{self.chunks_total} in index; {self.seconds:.2f} s"
        )


def embed_text(chunk: Chunk) -> str:
    """What the encoder sees: the heading path gives a section's text its context."""
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def walk_docs(root: Path, extensions: Sequence[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """(relative posix path, real path) of every Markdown file, plus warnings.

    Symlinks are followed when they stay inside the docs root, once each; loops and links
    that leave the root are reported and skipped. Hidden folders (.git, ...) are skipped.
    """
    real_root = root.resolve()
    found: dict[str, Path] = {}
    warnings: list[str] = []
    seen_dirs: set[Path] = set()
    exts = tuple(e.lower() for e in extensions)

    def visit(folder: Path, rel: str) -> None:
        real = folder.resolve()
        if real in seen_dirs:
            warnings.append(f"skipped {rel or '.'}: symlink loop or folder already indexed")
            return
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            warnings.append(f"skipped folder {rel or '.'}: {exc.strerror}")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                try:
                    follow_link(path, real_root, child)
                except AccessError as exc:
                    warnings.append(f"skipped {exc}")
                    continue
            if entry.is_dir():
                visit(path, child)
            elif entry.name.lower().endswith(exts):
                # Keyed by the real path: a file reached through links is one Source, and
                # visibility patterns match where it really is, not where a link put it.
                found.setdefault(real_relative(path, real_root), path.resolve())

    visit(root, "")
    return sorted(found.items()), warnings


def read_text(path: Path, rel: str, max_bytes: int) -> tuple[str | None, bytes | None, str | None]:
    """(text, raw bytes, warning): text is None when the file cannot be indexed."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return None, None, f"skipped {rel}: {size} bytes is over docs.max_file_bytes"
        raw = path.read_bytes()
    except PermissionError:
        return None, None, f"skipped {rel}: permission denied"
    except OSError as exc:
        return None, None, f"skipped {rel}: cannot read ({exc.strerror})"
    if b"\x00" in raw[:8192]:
        return None, None, f"skipped {rel}: binary file, not Markdown"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, None, f"skipped {rel}: not valid UTF-8 (byte {exc.start})"
    if not text.strip():
        return text, raw, f"{rel} is empty: nothing to index"
    return text, raw, None


def visibility_for(rel: str, front_matter: Sequence[str], settings: Settings) -> tuple[str, ...]:
    """Front matter wins; otherwise the groups of every matching config pattern; else public."""
    if front_matter:
        return tuple(sorted(set(front_matter)))
    groups: set[str] = set()
    for pattern, allowed in settings.visibility.groups_by_path.items():
        if fnmatch.fnmatchcase(rel, pattern):
            groups.update(allowed)
    return tuple(sorted(groups))


def _expected_manifest(settings: Settings, embedder: Embedder, docs_root: Path) -> store.Manifest:
    return store.Manifest(
        embedding_model=embedder.name,
        dimension=embedder.dimension,
        vector_kind="int8" if settings.embedding.backend == "onnx-int8" else "fp32",
        chunking={"max_tokens": settings.chunking.max_tokens,
                  "min_tokens": settings.chunking.min_tokens},
        index_kind=settings.index.kind,
        docs_root=str(docs_root.resolve()),
    )


def build_index(
    docs_root: Path,
    index_root: Path,
    settings: Settings,
    embedder: Embedder,
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> IndexReport:
    """Bring the index at index_root up to date with docs_root; returns what changed."""
    if settings.store.kind == "postgres":  # one shared index in a database (rag/stores)
        from rag.stores.pg_writer import build_index as build_in_database

        return build_in_database(docs_root, settings, embedder, rebuild=rebuild,
                                 progress=progress)
    started = time.perf_counter()
    if not docs_root.is_dir():
        raise IndexingError(f"docs folder {docs_root} does not exist or is not a folder")
    report = IndexReport()
    with store.writer_lock(index_root):
        wanted = _expected_manifest(settings, embedder, docs_root)
        old = None if rebuild or not store.exists(index_root) else store.load(index_root)
        if old is not None and (problems := old.manifest.mismatches(wanted)):
            raise IndexingError(
                f"index {index_root}: {problems[0]}; rebuild with `rag index --rebuild`"
            )
        files, report.warnings = walk_docs(docs_root, settings.docs.extensions)
        chunks, manifest_files = _chunk_files(files, old, settings, embedder, report)
        vectors = _update_vectors(chunks, old, settings, embedder, report, progress)
        from rag.lexical import LexicalIndex

        lexical = LexicalIndex.build([embed_text(c) for c in chunks])
        wanted.files = manifest_files
        version = store.write_version(index_root, wanted, chunks, vectors, lexical)
    report.version = version.name
    report.chunks_total = len(chunks)
    report.seconds = time.perf_counter() - started
    return report


def _chunk_files(
    files: list[tuple[str, Path]],
    old: store.IndexVersion | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
) -> tuple[list[Chunk], dict[str, store.FileEntry]]:
    old_files = old.manifest.files if old else {}
    old_chunks = {c.chunk_id: c for c in old.chunks} if old else {}
    chunks: list[Chunk] = []
    entries: dict[str, store.FileEntry] = {}
    for rel, path in files:
        text, raw, warning = read_text(path, rel, settings.docs.max_file_bytes)
        if warning:
            report.warnings.append(warning)
        if text is None or raw is None:
            continue
        digest = _hash(raw)
        prior = old_files.get(rel)
        parsed = parse_document(text)
        try:
            front = list(read_visibility(text, parsed.front_matter, parsed.body_start > 1))
        except UnclearVisibility as exc:
            # Indexing it would make a restricted file public: leave it out until fixed.
            report.warnings.append(f"skipped {rel}: {exc}")
            continue
        if prior is not None and prior.content_hash == digest:
            visibility = visibility_for(rel, front, settings)
            kept = [old_chunks[cid] for cid in prior.chunk_ids]
            chunks.extend(replace(c, visibility=visibility) for c in kept)
            entries[rel] = replace(prior, visibility=front)
            report.unchanged.append(rel)
            continue
        visibility = visibility_for(rel, front, settings)
        new = chunk_document(
            text, rel,
            max_tokens=settings.chunking.max_tokens,
            min_tokens=settings.chunking.min_tokens,
            count_tokens=embedder.count_tokens,
            visibility=visibility,
        )
        chunks.extend(new)
        entries[rel] = store.FileEntry(source_id_for(rel), digest, [c.chunk_id for c in new], front)
        (report.changed if prior is not None else report.added).append(rel)
    report.removed = sorted(set(old_files) - set(entries))
    by_hash = {old_files[p].content_hash: p for p in report.removed}
    report.renamed = [(by_hash[entries[p].content_hash], p) for p in report.added
                      if entries[p].content_hash in by_hash]
    return chunks, entries


def _update_vectors(
    chunks: list[Chunk],
    old: store.IndexVersion | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
    progress: Progress | None,
) -> object:
    """Keep vectors of unchanged embedded text, embed the rest, drop what left the index."""
    wanted = {store.faiss_id(c.chunk_id): c for c in chunks}
    hashes = {fid: _hash(embed_text(c).encode("utf-8")) for fid, c in wanted.items()}
    old_hash: dict[int, str] = {}
    if old is not None:
        old_hash = {store.faiss_id(c.chunk_id): _hash(embed_text(c).encode("utf-8"))
                    for c in old.chunks}
    fid_of_hash = {h: fid for fid, h in old_hash.items()}
    keep = [fid for fid, h in hashes.items() if old_hash.get(fid) == h]
    todo = [fid for fid in wanted if old_hash.get(fid) != hashes[fid]]
    reuse = [fid for fid in todo if hashes[fid] in fid_of_hash]
    embed = [fid for fid in todo if hashes[fid] not in fid_of_hash]
    report.chunks_reused = len(keep) + len(reuse)

    reused = None
    if reuse and old is not None:
        reused = store.reconstruct(old.vectors, [fid_of_hash[hashes[f]] for f in reuse])
    files = len({wanted[f].source_path for f in embed})
    fresh = _embed(embedder, [embed_text(wanted[f]) for f in embed], settings,
                   progress and (lambda done, total: progress(done, total, files)))
    report.chunks_embedded = len(embed)

    index_settings = settings.index
    if old is not None and index_settings.kind == "flat":
        vectors = old.vectors  # remove what changed or left, add what is new
        stale = [fid for fid in old_hash if fid not in wanted or old_hash[fid] != hashes[fid]]
        if stale:
            import faiss

            vectors.remove_ids(faiss.IDSelectorBatch(np.array(stale, dtype=np.int64)))
    else:
        vectors = store.new_vector_index(
            embedder.dimension, index_settings.kind,
            index_settings.hnsw_m, index_settings.hnsw_ef_construction,
        )
        if keep and old is not None:
            _add(vectors, keep, store.reconstruct(old.vectors, keep))
    if reused is not None:
        _add(vectors, reuse, reused)
    _add(vectors, embed, fresh)
    return vectors


def _add(vectors: object, fids: list[int], matrix: np.ndarray) -> None:
    if fids:
        vectors.add_with_ids(  # type: ignore[attr-defined]
            np.ascontiguousarray(matrix, dtype=np.float32), np.array(fids, dtype=np.int64)
        )


def _embed(
    embedder: Embedder, texts: list[str], settings: Settings,
    progress: Callable[[int, int], None] | None,
) -> np.ndarray:
    out = np.zeros((len(texts), embedder.dimension), dtype=np.float32)
    # Hand the embedder several batches at once: it sorts what it gets by length, so
    # batches pad to similar lengths (less wasted compute) while progress still moves.
    size = settings.embedding.batch_size * EMBED_WINDOW_BATCHES
    for start in range(0, len(texts), size):
        out[start:start + size] = embedder.embed_batch(texts[start:start + size])
        if progress is not None:
            progress(min(start + size, len(texts)), len(texts))
    return out
