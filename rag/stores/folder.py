"""The index on disk: a folder of plain files, replaced atomically.

Layout of an index folder::

    CURRENT            name of the live version folder (replaced whole: atomic_write)
    v-<stamp>/         one complete version
        manifest.json  format version, embedding model, dimension, chunk settings, files
        chunks.jsonl   one Chunk record a line, in row order
        vectors.faiss  FAISS IndexIDMap2 keyed by faiss_id(chunk_id)
        lexical/       BM25 term counts and row lengths of the same chunks
    .lock              held (flock) while a writer builds a new version

A writer builds a complete new version folder, fsyncs it, then swaps CURRENT
(:func:`switch_version`). A process killed at any point leaves CURRENT naming the
previous, complete version, or the new one once the swap is done.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag.core.errors import IndexBusyError, IndexingError
from rag.core.files import TEMPORARY_SUFFIX, atomic_write, fsync_dir
from rag.core.paths import keep_private, make_dir
from rag.core.records import Chunk

FORMAT_VERSION = 1
CURRENT = "CURRENT"
LOCK = ".lock"
KEEP_VERSIONS = 2  # the live one and the one before, for readers that are still loading
REBUILD = "rebuild with `rag index --rebuild`"


def faiss_id(chunk_id: str) -> int:
    """Stable 60-bit FAISS id derived from a (hex) chunk id."""
    return int(chunk_id[:15], 16)


@dataclass
class FileEntry:
    """What the manifest remembers about one Source."""

    source_id: str
    content_hash: str
    chunk_ids: list[str]
    visibility: list[str] = field(default_factory=list)  # from front matter only


@dataclass(frozen=True)
class Sources:
    """What one index version holds that a set of groups may be shown, for the tools that
    name files rather than search (listing sources, reading cited lines, re-checking a
    saved answer): the files' manifest entries and their chunks' places, groups and readers.
    A folder index gives all of them and the callers check each file's groups; a database
    gives only what these groups may see."""

    files: Mapping[str, FileEntry]
    chunks: Sequence[Chunk]  # a database gives one per file, groups and reader, text left out
    counts: Mapping[str, int] | None = None  # chunks per file, where ``chunks`` are not all


@dataclass
class Manifest:
    embedding_model: str
    dimension: int
    vector_kind: str  # "fp32" or "int8": int8 vectors differ, so they never mix with fp32
    chunking: dict[str, int]
    index_kind: str
    docs_root: str = ""
    files: dict[str, FileEntry] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    created: float = 0.0
    chunk_rules: int = 0  # chunking.CHUNK_RULES when built; files are re-chunked when it differs
    # chunk id -> key of the text its vector was computed from (index_core.embed_key), so a
    # vector is reused only for the very text it came from, whatever the rules of today
    embedded: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """Read a manifest, checking every field's type; ValueError names what is wrong."""
        _check_fields(data, _MANIFEST_FIELDS, "manifest")
        chunking = data["chunking"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in chunking.values()):
            raise ValueError("manifest: chunking holds a value that is not a whole number")
        files = {}
        for path, entry in data.get("files", {}).items():
            _check_fields(entry, _FILE_FIELDS, f"manifest entry {path!r}")
            if not all(isinstance(x, str) for x in entry["chunk_ids"] + entry.get(
                    "visibility", [])):
                raise ValueError(f"manifest entry {path!r}: a chunk id or group is not text")
            files[path] = FileEntry(**entry)
        if not all(isinstance(k, str) for k in data.get("embedded", {}).values()):
            raise ValueError("manifest: an embedded-text key is not text")
        return cls(**{**data, "files": files})

    def mismatches(self, other: Manifest) -> list[str]:
        """What differs in settings that make two indexes incompatible."""
        out = []
        for name in ("embedding_model", "dimension", "vector_kind", "chunking", "index_kind"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{name} is {mine!r} in the index but {theirs!r} in the config")
        return out


# name -> (accepted types, required): what a damaged file is checked against on load.
_Fields = dict[str, tuple[tuple[type, ...], bool]]
_MANIFEST_FIELDS: _Fields = {
    "embedding_model": ((str,), True), "dimension": ((int,), True),
    "vector_kind": ((str,), True), "chunking": ((dict,), True), "index_kind": ((str,), True),
    "docs_root": ((str,), False), "files": ((dict,), False), "format_version": ((int,), False),
    "created": ((int, float), False), "chunk_rules": ((int,), False),
    "embedded": ((dict,), False),
}
_FILE_FIELDS: _Fields = {
    "source_id": ((str,), True), "content_hash": ((str,), True), "chunk_ids": ((list,), True),
    "visibility": ((list,), False),
}
_CHUNK_FIELDS: _Fields = {
    "chunk_id": ((str,), True), "source_id": ((str,), True), "source_path": ((str,), True),
    "text": ((str,), True), "start_line": ((int,), True), "end_line": ((int,), True),
    "heading": ((str, type(None)), False), "visibility": ((list,), False),
    "start_col": ((int,), False), "end_col": ((int,), False), "format": ((str,), False),
}
_HEX = frozenset("0123456789abcdef")


class DamagedFile(ValueError):
    """A file of an index version does not hold what it should; the message says what."""


def _check_fields(data: object, fields: _Fields, what: str) -> None:
    """ValueError unless ``data`` is an object with exactly these keys, of these types."""
    if not isinstance(data, dict):
        raise DamagedFile(f"{what} is not a JSON object")
    for name, (types, required) in fields.items():
        if name not in data:
            if required:
                raise ValueError(f"{what} has no {name!r}")
            continue
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise DamagedFile(f"{what}: {name!r} has the wrong type ({type(value).__name__})")
    extra = sorted(set(data) - set(fields))
    if extra:
        raise ValueError(f"{what} has an unexpected key {extra[0]!r}")


def chunk_from_json(line: str, number: int) -> Chunk:
    """One chunks.jsonl line as a Chunk; ValueError says which line and what is wrong."""
    what = f"chunks.jsonl line {number}"
    try:
        data = json.loads(line)
    except ValueError:
        raise ValueError(f"{what} is not valid JSON") from None
    _check_fields(data, _CHUNK_FIELDS, what)
    if len(data["chunk_id"]) < 15 or not set(data["chunk_id"]) <= _HEX:
        raise ValueError(f"{what}: chunk_id is not a hex id")
    if not 1 <= data["start_line"] <= data["end_line"]:
        raise ValueError(f"{what}: line range {data['start_line']}-{data['end_line']}")
    if not all(isinstance(g, str) for g in data.get("visibility") or ()):
        raise ValueError(f"{what}: a visibility group is not text")
    return Chunk.from_dict(data)


@dataclass
class IndexVersion:
    """One loaded, read-only version of an index."""

    path: Path
    manifest: Manifest
    chunks: list[Chunk]
    vectors: Any  # faiss.IndexIDMap2
    _row_of: dict[int, int] = field(default_factory=dict, repr=False)
    _lexical: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._row_of = {faiss_id(c.chunk_id): i for i, c in enumerate(self.chunks)}

    def row_of(self, fid: int) -> int | None:
        return self._row_of.get(int(fid))

    @property
    def lexical(self) -> Any:
        """The BM25 index, loaded on first use (dense-only queries never pay for it)."""
        if self._lexical is None:
            from rag.stores.lexical import LexicalIndex

            lexical = LexicalIndex.load(self.path / "lexical")
            if lexical.size != len(self.chunks):
                raise IndexingError(
                    f"index {self.path.parent}: the lexical index has {lexical.size} rows for "
                    f"{len(self.chunks)} chunks; {REBUILD}")
            self._lexical = lexical
        return self._lexical


def _read_current(root: Path) -> Path | None:
    try:
        name = (root / CURRENT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IndexingError(f"index {root}: cannot read {CURRENT} ({exc.strerror})") from None
    if not name.startswith("v-") or "/" in name:
        raise IndexingError(f"index {root}: {CURRENT} is damaged; rebuild with `rag index --rebuild`")
    return root / name


def exists(root: Path) -> bool:
    return (root / CURRENT).is_file()


def read_manifest(root: Path) -> Manifest | None:
    version = _read_current(root)
    if version is None:
        return None
    try:
        data = json.loads((version / "manifest.json").read_text(encoding="utf-8"))
    except OSError as exc:
        raise IndexingError(
            f"index {root}: manifest unreadable ({exc.strerror or exc}); {REBUILD}") from None
    except ValueError:
        raise IndexingError(f"index {root}: manifest.json is not valid JSON; {REBUILD}") from None
    if isinstance(data, dict) and data.get("format_version") != FORMAT_VERSION:
        raise IndexingError(
            f"index {root}: format version {data.get('format_version')!r} is not "
            f"{FORMAT_VERSION}; {REBUILD}"
        )
    try:
        return Manifest.from_dict(data)
    except ValueError as exc:
        raise IndexingError(f"index {root}: {exc}; {REBUILD}") from None


def load(root: Path, *, mmap: bool = False) -> IndexVersion:
    """Load the live version; says exactly what is missing or inconsistent."""
    import faiss

    manifest = read_manifest(root)
    if manifest is None:
        raise IndexingError(f"no index at {root}: build it with `rag index DOCS_DIR --index {root}`")
    version = _read_current(root)
    assert version is not None
    try:
        with open(version / "chunks.jsonl", encoding="utf-8") as fh:
            chunks = [chunk_from_json(line, n) for n, line in enumerate(fh, 1) if line.strip()]
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        vectors = faiss.read_index(str(version / "vectors.faiss"), flags)
    except OSError as exc:
        raise IndexingError(f"index {root}: cannot read {version.name} "
                            f"({exc.strerror or exc}); {REBUILD}") from None
    except UnicodeDecodeError:
        raise IndexingError(f"index {root}: chunks.jsonl is not UTF-8; {REBUILD}") from None
    except ValueError as exc:
        raise IndexingError(f"index {root}: {exc}; {REBUILD}") from None
    except RuntimeError:  # FAISS: truncated or not an index
        raise IndexingError(f"index {root}: vectors.faiss cannot be read; {REBUILD}") from None
    problem = _consistency_problem(manifest, chunks, vectors)
    if problem:
        raise IndexingError(f"index {root}: {problem}; {REBUILD}")
    return IndexVersion(version, manifest, chunks, vectors)


def _consistency_problem(manifest: Manifest, chunks: list[Chunk], vectors: Any) -> str | None:
    """What makes manifest, chunks and vectors disagree, or None."""
    import faiss

    if vectors.ntotal != len(chunks):
        return f"{vectors.ntotal} vectors for {len(chunks)} chunks"
    if vectors.d != manifest.dimension:
        return f"vectors have {vectors.d} dimensions, the manifest says {manifest.dimension}"
    ids = {faiss_id(c.chunk_id) for c in chunks}
    if len(ids) != len(chunks):
        return "chunks.jsonl holds a chunk id twice"
    id_map = getattr(vectors, "id_map", None)
    if id_map is None or set(faiss.vector_to_array(id_map).tolist()) != ids:
        return "vectors.faiss does not hold the vectors of the chunks in chunks.jsonl"
    known = {c.chunk_id for c in chunks}
    for path, entry in manifest.files.items():
        if not set(entry.chunk_ids) <= known:
            return f"the manifest lists chunks of {path} that chunks.jsonl lacks"
    return None


@contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """One writer per index folder; the kernel drops the lock if the writer dies.

    A cache index (in the user cache) is made 0700, with the cache's folders above it.
    """
    make_dir(root)
    with open(root / LOCK, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IndexBusyError(f"index {root} is being written by another process") from None
        yield


def write_version(
    root: Path, manifest: Manifest, chunks: Sequence[Chunk], vectors: Any, lexical: Any
) -> Path:
    """Write a complete version folder, then make it live with one atomic rename."""
    import faiss

    name = f"v-{time.time_ns():020d}-{uuid.uuid4().hex[:6]}"  # sorts by creation time
    tmp = root / f".tmp-{name}"
    tmp.mkdir(parents=True)
    manifest.created = time.time()
    body = "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n" for c in chunks)
    (tmp / "chunks.jsonl").write_bytes(body.encode("utf-8"))
    faiss.write_index(vectors, str(tmp / "vectors.faiss"))
    lexical.save(tmp / "lexical")
    (tmp / "manifest.json").write_bytes(manifest.to_json().encode("utf-8"))
    for path in tmp.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(tmp)
    final = root / name
    os.rename(tmp, final)
    fsync_dir(root)
    switch_version(root, name)
    _collect_garbage(root, keep=name)
    keep_private(root)  # a cache index's files 0600; nothing changes elsewhere
    return final


def switch_version(root: Path, name: str) -> None:
    """Make the complete version folder ``name`` the live one, in one atomic step."""
    atomic_write(root / CURRENT, name)


def _collect_garbage(root: Path, keep: str) -> None:
    """Drop unfinished temp folders and files and all but the newest KEEP_VERSIONS versions."""
    for tmp in root.glob(".tmp-v-*"):
        shutil.rmtree(tmp, ignore_errors=True)
    for tmp in root.glob(f".{CURRENT}.*{TEMPORARY_SUFFIX}"):  # only a writer writes CURRENT
        tmp.unlink(missing_ok=True)
    versions = sorted((p for p in root.glob("v-*") if p.is_dir()), key=lambda p: p.name)
    old = [p for p in versions if p.name != keep][: max(0, len(versions) - KEEP_VERSIONS)]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)


def new_vector_index(dimension: int, kind: str, hnsw_m: int = 32, ef_construction: int = 200) -> Any:
    """An empty id-keyed FAISS index (inner product over normalised vectors = cosine)."""
    import faiss

    inner: Any
    if kind == "hnsw":
        inner = faiss.IndexHNSWFlat(dimension, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = ef_construction
    else:
        inner = faiss.IndexFlatIP(dimension)
    return faiss.IndexIDMap2(inner)


def reconstruct(vectors: Any, ids: Sequence[int]) -> np.ndarray:
    """Stored vectors for these FAISS ids (used to reuse embeddings without recomputing)."""
    if not ids:
        return np.zeros((0, vectors.d), dtype=np.float32)
    return np.vstack([vectors.reconstruct(int(i)) for i in ids]).astype(np.float32)
