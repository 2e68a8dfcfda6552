"""A file's format is decided once, when it is indexed: each chunk records its reader, and
quoting, searching, rendering and checks read the chunk with that reader, whatever its
text looks like. An index from before the readers were recorded still answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import rag
from rag.indexer.embedding import FakeEmbedder
from rag.reader.formats import file_lines, quote_blocks, reader_named, search_text
from rag.reader.formats.sections import passage_blocks, shown_text
from rag.reader.formats.sphinx_conf import looks_like_rst
from rag.stores import folder as store

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
README = "# Station handbook\n\nThe handbook covers the sensor station and its data.\n"
# A Sphinx project that keeps its pages in .txt files (Django does).
CONF = "source_suffix = {'.rst': 'restructuredtext', '.txt': 'restructuredtext'}\n"
# Plain-looking (no directive, role, literal or ``::``), but reStructuredText makes each
# indented line the definition of the term above it.
OPTIONS = ("Server options\n==============\n\nport\n    The port the server listens on. "
           "Defaults to 8080.\n\nhost\n    The address to bind. Defaults to localhost.\n")
# No conf.py claims it, but it uses reStructuredText's markup.
SETUP = ("Station setup\n=============\n\nSet the option ``retries`` to five before the first "
         "run.\n\n.. note:: Restart the station after changing the retries option.\n")


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda *_a, **_k: FakeEmbedder())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def folder_with(tmp_path: Path, files: dict[str, str]) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for rel, text in {"README.md": README, **files}.items():
        (docs / rel).write_text(text, encoding="utf-8")
    return docs


def chunks_of(index: Path, rel: str) -> list:
    return [c for c in store.load(index).chunks if c.source_path == rel]


def cited_lines(docs: Path, rel: str, start: int, end: int) -> str:
    lines = file_lines((docs / rel).read_text(encoding="utf-8"), rel)
    return " ".join(line.strip() for line in lines[start - 1:end] if line.strip())


def test_a_txt_file_conf_py_claims_is_quoted_as_restructuredtext(tmp_path: Path) -> None:
    assert not looks_like_rst(OPTIONS)  # by its text alone it would be read as plain text
    docs = folder_with(tmp_path, {"conf.py": CONF, "options.txt": OPTIONS})
    report = rag.index(docs, tmp_path / "index")
    assert report.formats == {"markdown": 1, "rst": 1}
    chunks = chunks_of(tmp_path / "index", "options.txt")
    assert chunks and {c.format for c in chunks} == {"rst"}
    rst = reader_named("rst")
    for c in chunks:  # quoted and searched as the indexer read them
        blocks = rst.blocks(c.text.split("\n"), c.source_path)
        assert quote_blocks(c) == passage_blocks(blocks)
        assert search_text(c) == shown_text(blocks)
    answer = rag.ask("Which port does the server listen on by default?", index=tmp_path / "index")
    first = answer.statements[0]
    # The term "port" is the definition's term, not the first word of a sentence.
    assert first.text.startswith("The port the server listens on. Defaults to 8080.")
    cited = first.citations[0]
    assert cited.source_path == "options.txt" and cited.start_line <= 5 <= cited.end_line
    assert "Defaults to 8080." in cited_lines(docs, "options.txt", cited.start_line,
                                              cited.end_line)
    checks = rag.verify(answer, docs=docs, index=tmp_path / "index")
    assert checks and {c.status for c in checks} == {"exact"}


def test_a_plain_txt_that_looks_like_rst_is_quoted_as_plain_text(tmp_path: Path) -> None:
    assert looks_like_rst(SETUP)
    docs = folder_with(tmp_path, {"setup.txt": SETUP})
    report = rag.index(docs, tmp_path / "index")
    assert report.formats == {"markdown": 1, "text": 1}
    chunks = chunks_of(tmp_path / "index", "setup.txt")
    assert chunks and {c.format for c in chunks} == {"text"}
    text = reader_named("text")
    for c in chunks:
        assert quote_blocks(c) == passage_blocks(text.blocks(c.text.split("\n"), c.source_path))
    answer = rag.ask("How many retries should the option be set to before the first run?",
                     index=tmp_path / "index")
    first = answer.statements[0]
    cited = first.citations[0]
    assert cited.source_path == "setup.txt" and cited.start_line <= 4 <= cited.end_line
    # Quoted as the file writes it (plain text), not as reStructuredText renders it.
    assert "``retries``" in first.text
    assert first.text in cited_lines(docs, "setup.txt", cited.start_line, cited.end_line)
    checks = rag.verify(answer, docs=docs, index=tmp_path / "index")
    assert checks and {c.status for c in checks} == {"exact"}


def test_a_conf_py_added_later_rereads_the_unchanged_txt_files(tmp_path: Path) -> None:
    docs = folder_with(tmp_path, {"options.txt": OPTIONS})
    rag.index(docs, tmp_path / "index")
    assert {c.format for c in chunks_of(tmp_path / "index", "options.txt")} == {"text"}
    (docs / "conf.py").write_text(CONF, encoding="utf-8")
    report = rag.index(docs, tmp_path / "index")
    assert report.changed == ["options.txt"] and report.unchanged == ["README.md"]
    assert {c.format for c in chunks_of(tmp_path / "index", "options.txt")} == {"rst"}
    (docs / "conf.py").unlink()
    assert rag.index(docs, tmp_path / "index").changed == ["options.txt"]
    assert {c.format for c in chunks_of(tmp_path / "index", "options.txt")} == {"text"}


def strip_formats(index: Path) -> None:
    """Make the live version look written before chunks recorded their reader."""
    version = index / (index / "CURRENT").read_text(encoding="utf-8").strip()
    path = version / "chunks.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all("format" in row for row in rows)
    path.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "format"},
                                       ensure_ascii=False) + "\n" for row in rows),
                    encoding="utf-8")


def test_an_index_from_before_formats_were_recorded_still_answers(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(FIXTURES, docs)
    (docs / "README.md").write_text(README, encoding="utf-8")
    first = rag.index(docs, tmp_path / "index")
    strip_formats(tmp_path / "index")
    assert {c.format for c in store.load(tmp_path / "index").chunks} == {None}
    for question, rel, words in (
            ("Which port does the server listen on by default?", "guide.rst", "8080"),
            ("How do I drop the rows without answers before counting?", "demo.ipynb", "dropna"),
            ("How often should the batteries be replaced?", "notes.txt", "six months")):
        answer = rag.ask(question, index=tmp_path / "index")
        assert words in answer.answer and answer.citations[0].source_path == rel
        checks = rag.verify(answer, docs=docs, index=tmp_path / "index")
        assert {c.status for c in checks} == {"exact"}
    # The next `rag index` records the readers without calling anything changed.
    again = rag.index(docs, tmp_path / "index")
    assert sorted(again.unchanged) == sorted(first.added) and not again.changed
    assert again.chunks_embedded == 0
    formats = {c.source_path: c.format for c in store.load(tmp_path / "index").chunks}
    assert formats == {"README.md": "markdown", "guide.rst": "rst", "demo.ipynb": "notebook",
                       "page.html": "html", "notes.txt": "text"}


def test_a_damaged_format_field_is_one_clear_line(tmp_path: Path) -> None:
    docs = folder_with(tmp_path, {"options.txt": OPTIONS})
    rag.index(docs, tmp_path / "index")
    version = tmp_path / "index" / (tmp_path / "index" / "CURRENT").read_text().strip()
    path = version / "chunks.jsonl"
    path.write_text(path.read_text(encoding="utf-8").replace('"format": "text"', '"format": 7'),
                    encoding="utf-8")
    from rag.core.errors import IndexingError

    with pytest.raises(IndexingError, match="'format' has the wrong type"):
        store.load(tmp_path / "index")
