"""Indexer: docs folder -> chunks -> vectors, re-doing only what changed.

A file whose bytes are unchanged is neither re-chunked nor re-embedded (unless the chunking
rules changed since the index was built: ``chunking.CHUNK_RULES``). A chunk whose embedded
text is unchanged keeps its vector even when its lines moved or its file was renamed, because
vectors are looked up by the hash of the text that was embedded.

Which files are read, and how safely, is rag.walker's part. A file with several hard links
under the docs folder is one Source, visible only to users that every one of its paths
allows (fail closed).
"""

from __future__ import annotations

import fnmatch
import hashlib
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from rag import store
from rag.chunking import (
    CHUNK_RULES,
    chunk_document,
    no_chunks_reason,
    parse_document,
    source_id_for,
)
from rag.config import Settings
from rag.embedding import Embedder
from rag.errors import IndexingError
from rag.markup import clean_markup, is_mdx
from rag.records import Chunk
from rag.visibility import UnclearVisibility, read_visibility, visibility_warnings
from rag.walker import read_text, walk_docs, walk_sources

__all__ = ["IndexReport", "build_index", "embed_text", "read_text", "visibility_for",
           "walk_docs", "walk_sources"]

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
    no_chunks: dict[str, int] = field(default_factory=dict)  # reason -> files that gave none
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
        ) + self.no_chunks_line()

    def no_chunks_line(self) -> str:
        """'\\n3 files gave no chunks: 2 only front matter, 1 empty', or '' when none."""
        total = sum(self.no_chunks.values())
        if not total:
            return ""
        reasons = ", ".join(f"{n} {why}" for why, n in
                            sorted(self.no_chunks.items(), key=lambda item: (-item[1], item[0])))
        return f"\n{total} file{'s' if total != 1 else ''} gave no chunks: {reasons}"


def embed_text(chunk: Chunk) -> str:
    """What the encoder sees: the heading path, for context, then the text as a reader sees
    it (docs-generator markup, comments and link definitions left out: rag.markup)."""
    text = clean_markup(chunk.text, mdx=is_mdx(chunk.source_path))
    return f"{chunk.heading}\n{text}" if chunk.heading else text


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def embed_key(text: str) -> str:
    """A short key of a chunk's embedded text (``embed_text``): 128 bits of its SHA-256."""
    return _hash(text.encode("utf-8"))[:32]


def pattern_matches(pattern: str, rel: str) -> bool:
    """A groups_by_path pattern against a docs-relative path, ignoring case and Unicode
    normal form on every filesystem: ``internal/*`` restricts ``Internal/x.md`` too, and
    ``geheim-ä/*`` written in NFC restricts a folder whose name macOS or a copy stored in
    NFD, so a folder's spelling can never make a file public, and the same docs get the
    same visibility everywhere."""
    return fnmatch.fnmatchcase(_caseless(rel), _caseless(pattern))


def _caseless(text: str) -> str:
    """Unicode's canonical caseless form (NFD, casefold), composed again to NFC so that a
    pattern's ``?`` still stands for one letter, accented or not."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).casefold())


def visibility_for(rel: str, front_matter: Sequence[str], settings: Settings) -> tuple[str, ...]:
    """Front matter wins; otherwise the groups of every matching config pattern; otherwise
    ``visibility.default_groups`` (empty by default: public)."""
    if front_matter:
        return tuple(sorted(set(front_matter)))
    groups: set[str] = set()
    for pattern, allowed in settings.visibility.groups_by_path.items():
        if pattern_matches(pattern, rel):
            groups.update(g for g in allowed if g.strip())
    if not groups:
        groups.update(g.strip() for g in settings.visibility.default_groups if g.strip())
    return tuple(sorted(groups))


def unmatched_patterns(rels: Sequence[str], settings: Settings) -> list[str]:
    """One warning for each groups_by_path pattern that matches no file."""
    return [f"visibility.groups_by_path pattern {pattern!r} matches no file: nothing is "
            "restricted by it" for pattern in settings.visibility.groups_by_path
            if not any(pattern_matches(pattern, rel) for rel in rels)]


def _visibility_of_links(
    rel: str, aliases: Sequence[str], front_matter: Sequence[str], settings: Settings
) -> tuple[str, ...] | None:
    """visibility_for a file reached by several hard links: every path's rule must allow a
    user, so the groups are the intersection of the restricted paths' groups; None when
    no group is allowed by all of them (the file is then left out)."""
    restricted = [set(g) for p in (rel, *aliases) if (g := visibility_for(p, front_matter,
                                                                           settings))]
    if not restricted:
        return ()
    allowed = set.intersection(*restricted)
    return tuple(sorted(allowed)) if allowed else None


class Indexed(Protocol):
    """What re-chunking needs of the current index, whichever store holds it."""

    @property
    def manifest(self) -> store.Manifest: ...

    @property
    def chunks(self) -> Sequence[Chunk]: ...


def _expected_manifest(settings: Settings, embedder: Embedder, docs_root: Path) -> store.Manifest:
    return store.Manifest(
        embedding_model=embedder.name,
        dimension=embedder.dimension,
        vector_kind="int8" if settings.embedding.backend == "onnx-int8" else "fp32",
        chunking={"max_tokens": settings.chunking.max_tokens,
                  "min_tokens": settings.chunking.min_tokens},
        index_kind=settings.index.kind,
        docs_root=str(docs_root.resolve()),
        chunk_rules=CHUNK_RULES,
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
        chunks, manifest_files = chunk_folder(docs_root, old, settings, embedder, report)
        vectors, wanted.embedded = _update_vectors(chunks, old, settings, embedder, report,
                                                   progress)
        from rag.lexical import LexicalIndex

        lexical = LexicalIndex.from_chunks(chunks)
        wanted.files = manifest_files
        version = store.write_version(index_root, wanted, chunks, vectors, lexical)
    report.version = version.name
    report.chunks_total = len(chunks)
    report.seconds = time.perf_counter() - started
    return report


def chunk_folder(
    docs_root: Path,
    old: Indexed | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
) -> tuple[list[Chunk], dict[str, store.FileEntry]]:
    """Walk the docs folder and chunk what changed since ``old`` (any store's version with
    a manifest and chunks); IndexingError, with nothing written, when it holds no Markdown."""
    files, aliases, report.warnings = walk_sources(docs_root, settings.docs.extensions)
    if not files:  # nothing written: an existing index stays as it was
        raise IndexingError(f"docs folder {docs_root} has no Markdown files "
                            f"({', '.join(settings.docs.extensions)}); nothing to index")
    paths = [rel for rel, _ in files] + [a for links in aliases.values() for a in links]
    report.warnings += unmatched_patterns(paths, settings)
    return _chunk_files(files, aliases, old, settings, embedder, report)


def _chunk_files(
    files: list[tuple[str, Path]],
    aliases: dict[str, list[str]],
    old: Indexed | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
) -> tuple[list[Chunk], dict[str, store.FileEntry]]:
    old_files = old.manifest.files if old else {}
    old_chunks = {c.chunk_id: c for c in old.chunks} if old else {}
    same_rules = old is not None and old.manifest.chunk_rules == CHUNK_RULES
    chunks: list[Chunk] = []
    entries: dict[str, store.FileEntry] = {}
    no_chunks: Counter[str] = Counter()
    for rel, path in files:
        text, raw, warning = read_text(path, rel, settings.docs.max_file_bytes)
        if warning:
            report.warnings.append(warning)
        if text is None or raw is None:
            no_chunks["skipped (see warnings)"] += 1
            continue
        digest = _hash(raw)
        prior = old_files.get(rel)
        parsed = parse_document(text)
        try:
            front = list(read_visibility(text, parsed))
        except UnclearVisibility as exc:
            # Indexing it would make a restricted file public: leave it out until fixed.
            report.warnings.append(f"skipped {rel}: {exc}")
            no_chunks["skipped (see warnings)"] += 1
            continue
        report.warnings.extend(f"{rel}: {why}" for why in visibility_warnings(text, parsed))
        links = aliases.get(rel, [])
        if prior is not None and prior.content_hash == digest and same_rules:
            visibility = _visibility_of_links(rel, links, front, settings)
            if visibility is None:
                report.warnings.append(_conflict(rel, links))
                no_chunks["skipped (see warnings)"] += 1
                continue
            if not prior.chunk_ids:
                no_chunks[no_chunks_reason(parsed, rel)] += 1
            kept = [old_chunks[cid] for cid in prior.chunk_ids]
            chunks.extend(replace(c, visibility=visibility) for c in kept)
            entries[rel] = replace(prior, visibility=front)
            report.unchanged.append(rel)
            continue
        visibility = _visibility_of_links(rel, links, front, settings)
        if visibility is None:
            report.warnings.append(_conflict(rel, links))
            no_chunks["skipped (see warnings)"] += 1
            continue
        new = chunk_document(
            text, rel,
            max_tokens=settings.chunking.max_tokens,
            min_tokens=settings.chunking.min_tokens,
            count_tokens=embedder.count_tokens,
            visibility=visibility,
        )
        if not new:
            no_chunks[no_chunks_reason(parsed, rel)] += 1
        chunks.extend(new)
        entries[rel] = store.FileEntry(source_id_for(rel), digest, [c.chunk_id for c in new], front)
        (report.changed if prior is not None else report.added).append(rel)
    report.no_chunks = dict(no_chunks)
    report.removed = sorted(set(old_files) - set(entries))
    by_hash = {old_files[p].content_hash: p for p in report.removed}
    report.renamed = [(by_hash[entries[p].content_hash], p) for p in report.added
                      if entries[p].content_hash in by_hash]
    return chunks, entries


def _conflict(rel: str, links: Sequence[str]) -> str:
    return (f"skipped {rel}: it is also {', '.join(links)} (hard links), and no group may "
            "see all of these paths")


def _update_vectors(
    chunks: list[Chunk],
    old: store.IndexVersion | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
    progress: Progress | None,
) -> tuple[object, dict[str, str]]:
    """Keep vectors of unchanged embedded text, embed the rest, drop what left the index;
    also returns each chunk's embedded-text key, for the manifest."""
    wanted = {store.faiss_id(c.chunk_id): c for c in chunks}
    texts = {fid: embed_text(c) for fid, c in wanted.items()}
    hashes = {fid: embed_key(text) for fid, text in texts.items()}
    old_hash = _old_keys(old)
    fid_of_hash = {h: fid for fid, h in old_hash.items() if h}
    keep = [fid for fid, h in hashes.items() if old_hash.get(fid) == h]
    todo = [fid for fid in wanted if old_hash.get(fid) != hashes[fid]]
    reuse = [fid for fid in todo if hashes[fid] in fid_of_hash]
    embed = [fid for fid in todo if hashes[fid] not in fid_of_hash]
    report.chunks_reused = len(keep) + len(reuse)

    reused = None
    if reuse and old is not None:
        reused = store.reconstruct(old.vectors, [fid_of_hash[hashes[f]] for f in reuse])
    files = len(report.added) + len(report.changed)  # as the summary counts them
    fresh = _embed(embedder, [texts[f] for f in embed], settings,
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
    return vectors, {c.chunk_id: hashes[fid] for fid, c in wanted.items()}


def _old_keys(old: store.IndexVersion | None) -> dict[int, str]:
    """The embedded-text key of each vector of the old index ("" where unknown, so never
    reused): as its manifest recorded it, or, for an index from before keys were recorded,
    re-derived with today's rules when they are the rules it was built with."""
    if old is None:
        return {}
    if old.manifest.embedded:
        return {store.faiss_id(c.chunk_id): old.manifest.embedded.get(c.chunk_id, "")
                for c in old.chunks}
    same_rules = old.manifest.chunk_rules == CHUNK_RULES
    return {store.faiss_id(c.chunk_id): embed_key(embed_text(c)) if same_rules else ""
            for c in old.chunks}


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
    if progress is not None and texts:
        progress(0, len(texts))  # the total is known before the first batch
    for start in range(0, len(texts), size):
        out[start:start + size] = embedder.embed_batch(texts[start:start + size])
        if progress is not None:
            progress(min(start + size, len(texts)), len(texts))
    return out
