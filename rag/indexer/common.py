"""What every store's index writer shares: the docs folder read and chunked, the manifest
an index is built under, and the embedding of chunk texts.

rag.indexer.indexing writes the folder store with these and rag.indexer.pg_writer the database one;
living here, below both, they let rag.indexer.indexing hand a database build to pg_writer without
pg_writer importing rag.indexer.indexing back.

Which files are read, and how safely, is rag.reader.walker's part. A file with several hard links
under the docs folder is one Source, visible only to users that every one of its paths
allows (fail closed).
"""

from __future__ import annotations

import fnmatch
import hashlib
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from rag.core.config import Settings
from rag.core.errors import IndexingError
from rag.core.records import Chunk
from rag.indexer.embedding import Embedder
from rag.reader.chunking import (
    CHUNK_RULES,
    ParsedDoc,
    no_chunks_reason,
    parse_document,
    source_id_for,
)
from rag.reader.formats import (
    Formats,
    Reader,
    UnreadableFile,
    chunk_file,
    folder_formats,
    search_text,
    visibility_of,
)
from rag.reader.markup import clean_markup, is_mdx
from rag.reader.visibility import UnclearVisibility, read_visibility, visibility_warnings
from rag.reader.walker import read_text, walk_sources
from rag.stores import folder as store

EMBED_WINDOW_BATCHES = 8  # batches per embed_batch call (see embed_texts)
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
    formats: dict[str, int] = field(default_factory=dict)  # reader name -> files it read
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
        ) + self.formats_line() + self.no_chunks_line()

    def formats_line(self) -> str:
        """'\nformats: 70 rst, 5 text' when a file other than Markdown was read, else ''."""
        if set(self.formats) <= {"markdown"}:
            return ""
        counts = sorted(self.formats.items(), key=lambda item: (-item[1], item[0]))
        return "\nformats: " + ", ".join(f"{n} {name}" for name, n in counts)

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
    it (docs-generator markup, comments and link definitions left out: rag.reader.markup)."""
    shown = search_text(chunk)
    text = clean_markup(chunk.text, mdx=is_mdx(chunk.source_path)) if shown is None else shown
    return f"{chunk.heading}\n{text}" if chunk.heading else text


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 by which both stores know a file's bytes and a chunk's embedded text."""
    return hashlib.sha256(data).hexdigest()


def embed_key(text: str) -> str:
    """A short key of a chunk's embedded text (``embed_text``): 128 bits of its SHA-256."""
    return sha256_hex(text.encode("utf-8"))[:32]


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


def expected_manifest(settings: Settings, embedder: Embedder, docs_root: Path) -> store.Manifest:
    """The manifest an index built now would have, before its files: an existing index whose
    manifest disagrees with it cannot be updated, only rebuilt."""
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


def chunk_folder(
    docs_root: Path,
    old: Indexed | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
) -> tuple[list[Chunk], dict[str, store.FileEntry]]:
    """Walk the docs folder and chunk what changed since ``old`` (any store's version with
    a manifest and chunks); IndexingError, with nothing written, when it holds no Markdown."""
    formats = folder_formats(docs_root)
    extensions = formats.extensions(settings.docs.extensions)
    files, aliases, report.warnings = walk_sources(docs_root, extensions)
    if not files:  # nothing written: an existing index stays as it was
        raise IndexingError(f"docs folder {docs_root} has no docs files "
                            f"({', '.join(extensions)}); nothing to index")
    paths = [rel for rel, _ in files] + [a for links in aliases.values() for a in links]
    report.warnings += unmatched_patterns(paths, settings)
    return _chunk_files(files, aliases, old, settings, embedder, report, formats)


def _chunk_files(
    files: list[tuple[str, Path]],
    aliases: dict[str, list[str]],
    old: Indexed | None,
    settings: Settings,
    embedder: Embedder,
    report: IndexReport,
    formats: Formats,
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
        digest = sha256_hex(raw)
        prior = old_files.get(rel)
        reader = formats.reader(rel)
        try:
            parsed, front = _read_head(text, rel, reader)
        except UnclearVisibility as exc:
            # Indexing it would make a restricted file public: leave it out until fixed.
            report.warnings.append(f"skipped {rel}: {exc}")
            no_chunks["skipped (see warnings)"] += 1
            continue
        except UnreadableFile as exc:
            report.warnings.append(f"skipped {rel}: {exc}")
            no_chunks["skipped (see warnings)"] += 1
            continue
        report.formats[reader.name] = report.formats.get(reader.name, 0) + 1
        report.warnings.extend(f"{rel}: {why}" for why in visibility_warnings(text, parsed))
        links = aliases.get(rel, [])
        same_bytes = prior is not None and prior.content_hash == digest and same_rules
        kept = [old_chunks[cid] for cid in prior.chunk_ids] if same_bytes and prior else []
        # Unchanged bytes read by another reader than before (a Sphinx conf.py came or went,
        # or an index from before chunks recorded their reader) are chunked again.
        if same_bytes and prior and all(c.format == reader.name for c in kept):
            visibility = _visibility_of_links(rel, links, front, settings)
            if visibility is None:
                report.warnings.append(_conflict(rel, links))
                no_chunks["skipped (see warnings)"] += 1
                continue
            if not prior.chunk_ids:
                no_chunks[no_chunks_reason(parsed, rel)] += 1
            chunks.extend(replace(c, visibility=visibility) for c in kept)
            entries[rel] = replace(prior, visibility=front)
            report.unchanged.append(rel)
            continue
        visibility = _visibility_of_links(rel, links, front, settings)
        if visibility is None:
            report.warnings.append(_conflict(rel, links))
            no_chunks["skipped (see warnings)"] += 1
            continue
        try:
            new = chunk_file(
                text, rel, reader,
                max_tokens=settings.chunking.max_tokens,
                min_tokens=settings.chunking.min_tokens,
                count_tokens=embedder.count_tokens,
                visibility=visibility,
            )
        except UnreadableFile as exc:
            report.warnings.append(f"skipped {rel}: {exc}")
            no_chunks["skipped (see warnings)"] += 1
            continue
        if not new:
            no_chunks[no_chunks_reason(parsed, rel)] += 1
        chunks.extend(new)
        entries[rel] = store.FileEntry(source_id_for(rel), digest, [c.chunk_id for c in new], front)
        if same_bytes and all(c.format is None for c in kept) \
                and [_place(c) for c in new] == [_place(c) for c in kept]:
            report.unchanged.append(rel)  # its reader recorded now: the same chunks
        else:
            (report.changed if prior is not None else report.added).append(rel)
    report.no_chunks = dict(no_chunks)
    report.removed = sorted(set(old_files) - set(entries))
    by_hash = {old_files[p].content_hash: p for p in report.removed}
    report.renamed = [(by_hash[entries[p].content_hash], p) for p in report.added
                      if entries[p].content_hash in by_hash]
    return chunks, entries


def _read_head(text: str, rel: str, reader: Reader) -> tuple[ParsedDoc, list[str]]:
    """The file parsed for its front matter, and the groups it restricts itself to
    (UnclearVisibility, UnreadableFile). Markdown as it always was; another format from
    the lines its reader numbers (rag.reader.formats.visibility_of)."""
    if reader.name == "markdown":
        parsed = parse_document(text)
        return parsed, list(read_visibility(text, parsed))
    lines = reader.lines(text)
    return parse_document("\n".join(lines)), list(visibility_of(rel, lines, reader))


def _place(chunk: Chunk) -> tuple[str, int, int, int | None, int | None]:
    return chunk.chunk_id, chunk.start_line, chunk.end_line, chunk.start_col, chunk.end_col


def _conflict(rel: str, links: Sequence[str]) -> str:
    return (f"skipped {rel}: it is also {', '.join(links)} (hard links), and no group may "
            "see all of these paths")


def embed_texts(
    embedder: Embedder, texts: list[str], settings: Settings,
    progress: Callable[[int, int], None] | None,
) -> np.ndarray:
    """Vectors of ``texts`` in order, with progress (done, total) after each window."""
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
