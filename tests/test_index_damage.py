"""A damaged index is reported in one line with exit 5, and nothing reading it changes it.

Each case damages one file of a built index in one way (truncated, not JSON, wrong shape,
wrong types, missing keys or files, counts that disagree), then runs `rag search` (which
loads every part, the BM25 arrays included) and, where the indexer reads that part, `rag
index`. Every file of the index folder must be byte-identical afterwards.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rag.indexer.embedding import FakeEmbedder
from rag.interfaces.cli.main import app
from tests.conftest import FIXTURE_DOCS

Damage = Callable[[Path], None]


def _edit_json(name: str, change: Callable[[dict], object]) -> Damage:
    def damage(version: Path) -> None:
        data = json.loads((version / name).read_text(encoding="utf-8"))
        result = change(data)
        (version / name).write_text(json.dumps(data if result is None else result),
                                    encoding="utf-8")
    return damage


def _edit_chunk(line: int, change: Callable[[dict], None]) -> Damage:
    def damage(version: Path) -> None:
        lines = (version / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
        record = json.loads(lines[line])
        change(record)
        lines[line] = json.dumps(record)
        (version / "chunks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return damage


def _edit_lines(change: Callable[[list[str]], list[str]]) -> Damage:
    def damage(version: Path) -> None:
        lines = (version / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
        (version / "chunks.jsonl").write_text("\n".join(change(lines)) + "\n", encoding="utf-8")
    return damage


def _truncate(name: str, keep: float = 0.5) -> Damage:
    def damage(version: Path) -> None:
        data = (version / name).read_bytes()
        (version / name).write_bytes(data[: int(len(data) * keep)])
    return damage


def _write(name: str, data: bytes) -> Damage:
    def damage(version: Path) -> None:
        (version / name).write_bytes(data)
    return damage


def _remove(name: str) -> Damage:
    def damage(version: Path) -> None:
        (version / name).unlink()
    return damage


def _save_npy(name: str, make: Callable[[np.ndarray], np.ndarray]) -> Damage:
    def damage(version: Path) -> None:
        path = version / "lexical" / name
        array = np.load(path)
        np.save(path, make(array))
    return damage


def _set(key: str, value: object) -> Callable[[dict], None]:
    return lambda d: d.__setitem__(key, value)


def _first_file(change: Callable[[dict], None]) -> Callable[[dict], None]:
    return lambda d: change(next(iter(d["files"].values())))


def _chunk_line_range(record: dict) -> None:
    record["start_line"], record["end_line"] = 9, 2


def _drop_chunk_of_manifest(data: dict) -> None:
    next(iter(data["files"].values()))["chunk_ids"].append("f" * 32)


MANIFEST = {
    "manifest truncated": _truncate("manifest.json"),
    "manifest empty": _write("manifest.json", b""),
    "manifest a list": _write("manifest.json", b"[]"),
    "manifest a string": _write("manifest.json", b'"manifest"'),
    "manifest dimension as text": _edit_json("manifest.json", _set("dimension", "384")),
    "manifest dimension as bool": _edit_json("manifest.json", _set("dimension", True)),
    "manifest chunking not numbers": _edit_json(
        "manifest.json", lambda d: d["chunking"].__setitem__("max_tokens", "big")),
    "manifest missing embedding_model": _edit_json(
        "manifest.json", lambda d: d.pop("embedding_model")),
    "manifest unknown key": _edit_json("manifest.json", _set("surprise", 1)),
    "manifest files not an object": _edit_json("manifest.json", _set("files", [])),
    "manifest file chunk_ids not a list": _edit_json(
        "manifest.json", _first_file(_set("chunk_ids", "abc"))),
    "manifest file missing content_hash": _edit_json(
        "manifest.json", _first_file(lambda e: e.pop("content_hash"))),
    "manifest file lists unknown chunk": _edit_json("manifest.json", _drop_chunk_of_manifest),
    "manifest other format version": _edit_json("manifest.json", _set("format_version", 99)),
    "manifest without format version": _edit_json(
        "manifest.json", lambda d: d.pop("format_version")),
}
CHUNKS = {
    "chunks truncated mid-line": _truncate("chunks.jsonl", 0.97),
    "chunks empty": _write("chunks.jsonl", b""),
    "chunks bad JSON line": _edit_lines(lambda lines: [*lines[:2], "{not json", *lines[3:]]),
    "chunks line not an object": _edit_lines(lambda lines: ["[1, 2]", *lines[1:]]),
    "chunks missing text": _edit_chunk(0, lambda r: r.pop("text")),
    "chunks missing chunk_id": _edit_chunk(1, lambda r: r.pop("chunk_id")),
    "chunks start_line as text": _edit_chunk(0, _set("start_line", "3")),
    "chunks text as number": _edit_chunk(0, _set("text", 5)),
    "chunks heading as number": _edit_chunk(0, _set("heading", 7)),
    "chunks visibility as text": _edit_chunk(0, _set("visibility", "staff")),
    "chunks visibility with a number": _edit_chunk(0, _set("visibility", [1])),
    "chunks chunk_id not hex": _edit_chunk(0, _set("chunk_id", "zz" * 16)),
    "chunks backwards line range": _edit_chunk(0, _chunk_line_range),
    "chunks one line missing": _edit_lines(lambda lines: lines[1:]),
    "chunks one line twice": _edit_lines(lambda lines: [lines[0], *lines]),
    "chunks not UTF-8": _write("chunks.jsonl", b'{"chunk_id": "\xff\xfe"}\n'),
}
VECTORS = {
    "vectors truncated": _truncate("vectors.faiss"),
    "vectors missing": _remove("vectors.faiss"),
    "vectors garbage": _write("vectors.faiss", b"not a faiss index" * 10),
}
LEXICAL = {
    "lexical.json missing": _remove("lexical/lexical.json"),
    "lexical.json a list": _write("lexical/lexical.json", b"[]"),
    "lexical.json wrong row count": _edit_json("lexical/lexical.json", lambda d: {**d, "size": 3}),
    "lexical.json size as text": _edit_json("lexical/lexical.json", lambda d: {**d, "size": "9"}),
    "vocab missing": _remove("lexical/vocab.json"),
    "vocab a list": _write("lexical/vocab.json", b"[1, 2]"),
    "vocab truncated": _truncate("lexical/vocab.json"),
    "vocab id out of range": _edit_json("lexical/vocab.json", _set("port", 10**6)),
    "tf.npy missing": _remove("lexical/tf.npy"),
    "tf.npy truncated": _truncate("lexical/tf.npy"),
    "rows.npy truncated": _truncate("lexical/rows.npy", 0.9),
    "indptr.npy header only": _truncate("lexical/indptr.npy", 0.05),
    "lengths.npy missing": _remove("lexical/lengths.npy"),
    "tf.npy two-dimensional": _save_npy("tf.npy", lambda a: a.reshape(1, -1)),
    "tf.npy shorter": _save_npy("tf.npy", lambda a: a[:-1]),
    "tf.npy zero": _save_npy("tf.npy", lambda a: a * 0),
    "rows out of range": _save_npy("rows.npy", lambda a: a + 10**6),
    "indptr not sorted": _save_npy("indptr.npy", lambda a: a[::-1].copy()),
    "lengths shorter": _save_npy("lengths.npy", lambda a: a[:-1]),
    "lengths zero": _save_npy("lengths.npy", lambda a: a * 0),
    "tf.npy of text": _save_npy("tf.npy", lambda a: a.astype(str)),
    "tf.npy of floats": _save_npy("tf.npy", lambda a: a.astype(np.float32)),
}
CURRENT = {
    "CURRENT names a missing version": lambda v: (v.parent / "CURRENT").write_text(
        "v-0000-gone", encoding="utf-8"),
    "CURRENT garbage": lambda v: (v.parent / "CURRENT").write_text("../../etc",
                                                                   encoding="utf-8"),
}
READ_BY_INDEXER = {**MANIFEST, **CHUNKS, **VECTORS, **CURRENT}
ALL = {**READ_BY_INDEXER, **LEXICAL}


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda _settings, **_: FakeEmbedder())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = tmp_path_factory.mktemp("damage") / "index"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rag.indexer.embedding.make_embedder", lambda _settings, **_: FakeEmbedder())
        code, _, err = run("index", str(FIXTURE_DOCS), "--index", str(index))
    assert code == 0, err
    return index


def damaged_copy(built: Path, tmp_path: Path, damage: Damage) -> Path:
    index = tmp_path / "index"
    shutil.copytree(built, index)
    version = index / (index / "CURRENT").read_text(encoding="utf-8").strip()
    damage(version)
    return index


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def assert_index_error(code: int, out: str, err: str) -> None:
    assert code == 5, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert "rebuild" in err, err


def test_the_undamaged_index_works(built: Path):
    code, out, err = run("search", "server port", "--index", str(built), "--json")
    assert code == 0, err
    assert len(out.splitlines()) >= 3


@pytest.mark.parametrize("name", list(ALL))
def test_search_on_a_damaged_index_is_one_line_exit_5(built: Path, tmp_path: Path, name: str):
    index = damaged_copy(built, tmp_path, ALL[name])
    before = snapshot(index)
    assert_index_error(*run("search", "server port", "--index", str(index)))
    assert snapshot(index) == before


@pytest.mark.parametrize("name", list(READ_BY_INDEXER))
def test_reindexing_a_damaged_index_is_one_line_exit_5(built: Path, tmp_path: Path, name: str):
    index = damaged_copy(built, tmp_path, READ_BY_INDEXER[name])
    before = snapshot(index)
    assert_index_error(*run("index", str(FIXTURE_DOCS), "--index", str(index)))
    assert snapshot(index) == before


@pytest.mark.parametrize("name", ["manifest truncated", "chunks bad JSON line",
                                  "vectors truncated", "rows out of range"])
def test_rebuild_replaces_a_damaged_index(built: Path, tmp_path: Path, name: str):
    index = damaged_copy(built, tmp_path, ALL[name])
    code, _, err = run("index", str(FIXTURE_DOCS), "--index", str(index), "--rebuild")
    assert code == 0, err
    code, out, err = run("search", "server port", "--index", str(index), "--json")
    assert code == 0 and out, err
