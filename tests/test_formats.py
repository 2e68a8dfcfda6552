"""Readers of formats other than Markdown: headings, blocks and exact lines of small fixtures.

Each fixture's line numbers are known (tests/fixtures/formats); a chunk's text must be its
lines of the file as the reader numbers them, and what a reader leaves out (Sphinx's
navigation, a page's scripts and chrome, a notebook's outputs) must not be indexed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag.reader.chunking import span_text
from rag.reader.formats import (
    chunk_file,
    file_lines,
    folder_formats,
    quote_blocks,
    reader_for,
    search_text,
)
from rag.reader.formats.base import split_lines
from rag.reader.formats.notebook import cell_of

FIXTURES = Path(__file__).parent / "fixtures" / "formats"


def count(text: str) -> int:
    return len(text.split()) + 2


def chunks_of(rel: str, root: Path = FIXTURES, max_tokens: int = 220) -> list:
    text = (root / rel).read_text(encoding="utf-8")
    return chunk_file(text, rel, folder_formats(root).reader(rel), max_tokens=max_tokens,
                      min_tokens=8, count_tokens=count, visibility=())


def blocks_of(rel: str) -> list:
    reader = reader_for(rel)
    lines = reader.lines((FIXTURES / rel).read_text(encoding="utf-8"))
    return reader.blocks(lines, rel)


def exact(rel: str, chunks: list) -> None:
    lines = file_lines((FIXTURES / rel).read_text(encoding="utf-8"), rel)
    for c in chunks:
        assert span_text(lines, c.start_line, c.end_line, c.start_col, c.end_col) == c.text


def test_rst_titles_build_the_heading_path_at_their_lines() -> None:
    headings = [(b.start, " > ".join(b.path)) for b in blocks_of("guide.rst")
                if b.kind == "heading"]
    assert headings == [(1, "Server Guide"), (11, "Server Guide > Options"),
                        (14, "Server Guide > Options > PORT")]


def test_rst_blocks_sit_on_the_lines_that_hold_them() -> None:
    found = {(b.kind, b.start, b.end): b.text for b in blocks_of("guide.rst")}
    assert found[("paragraph", 4, 5)] == ("The server answers HTTP requests. Start it with "
                                          "`serve` and read the options first.")
    assert found[("paragraph", 16, 16)] == "The port the server listens on. Defaults to `8080`."
    assert found[("paragraph", 18, 18)] == "Run it like this:"
    assert found[("code", 20, 20)] == "$ serve --port 9000"  # a literal block is code
    assert found[("code", 25, 26)] == "from app import serve\nserve(port=9000)"
    assert found[("paragraph", 30, 30)].startswith("Ports below 1024")


def test_unknown_sphinx_directives_read_as_their_text(capsys: pytest.CaptureFixture) -> None:
    found = {(b.start, b.end): b.text for b in blocks_of("guide.rst")}
    assert found[(7, 7)] == "New in version 2.1."
    assert found[(37, 37)] == "Deprecated since version 3.0."
    assert found[(38, 38)] == "Use `serve_forever` instead."
    texts = " ".join(found.values())
    assert "install" not in texts.split() and "usage" not in texts  # toctree: navigation
    assert capsys.readouterr() == ("", "")  # no docutils report reaches the user


def test_a_directive_title_reads_its_inline_markup_as_a_line_does() -> None:
    text = (".. tabs::\n\n    .. tab:: ``lsof`` (macOS / Linux)\n\n"
            "        .. code-block:: text\n\n            $ lsof -P -i :5000\n")
    reader = reader_for("server.rst")
    found = {b.start: b.text for b in reader.blocks(reader.lines(text), "server.rst")}
    assert found[3] == "`lsof` (macOS / Linux)"  # as ``lsof`` in a paragraph reads
    assert found[7] == "$ lsof -P -i :5000"


def test_a_named_reference_reads_as_its_name_and_code_keeps_its_underscores() -> None:
    text = ("Try a library such as Dynaconf_, or Werkzeug__.\n"
            "Call ``make_response_`` from ``__init__``; snake_case words stay.\n\n"
            ".. _Dynaconf: https://www.dynaconf.com\n")
    reader = reader_for("config.rst")
    [block] = [b for b in reader.blocks(reader.lines(text), "config.rst") if b.start == 1]
    assert block.lines == ("Try a library such as Dynaconf, or Werkzeug.",
                           "Call `make_response_` from `__init__`; snake_case words stay.")


def test_rst_chunks_are_the_files_lines_and_quote_what_they_hold() -> None:
    chunks = chunks_of("guide.rst")
    exact("guide.rst", chunks)
    assert chunks[0].start_line == 1 and chunks[0].heading == "Server Guide"
    port = next(c for c in chunks if "8080" in c.text)
    block = next(b for b in quote_blocks(port) if "8080" in b.lines[0])
    assert port.start_line + block.first == 16  # the quoted line is the file's line 16


def test_sphinx_conf_names_which_suffixes_are_rst(tmp_path: Path) -> None:
    (tmp_path / "conf.py").write_text(
        "import os\nproject = 'x'\nsource_suffix = {'.txt': 'restructuredtext', "
        "'.md': 'markdown'}\n", encoding="utf-8")
    (tmp_path / "intro.txt").write_text("Intro\n=====\n\nText.\n", encoding="utf-8")
    formats = folder_formats(tmp_path)
    assert formats.reader("intro.txt").name == "rst"
    assert formats.reader("notes.md").name == "markdown"
    assert folder_formats(FIXTURES).reader("notes.txt").name == "text"  # no conf.py
    (tmp_path / "conf.py").write_text("source_suffix = [\n", encoding="utf-8")
    assert folder_formats(tmp_path).reader("intro.txt").name == "text"  # not Sphinx's


def test_notebook_cells_map_to_the_ipynb_lines_that_store_them() -> None:
    rel = "demo.ipynb"
    lines = file_lines((FIXTURES / rel).read_text(encoding="utf-8"), rel)
    raw = split_lines((FIXTURES / rel).read_text(encoding="utf-8"))
    assert raw[9 - 1].strip() == '"Load the survey data with `pd.read_csv`.\\n",'
    assert lines[9 - 1] == "Load the survey data with `pd.read_csv`."
    assert lines[27 - 1] == "import pandas as pd"
    assert cell_of(lines, 9) == (1, 3) and cell_of(lines, 28) == (2, 2)
    assert cell_of(lines, 37) == (3, 3)
    chunks = chunks_of(rel)
    exact(rel, chunks)
    assert "output text never indexed" not in " ".join(c.text for c in chunks)
    cleaning = next(c for c in chunks if "dropna" in c.text)
    assert cleaning.heading == "Data Loading > Cleaning"
    kinds = {b.kind for c in chunks for b in quote_blocks(c)}
    assert kinds == {"prose", "code"}  # a code cell is a code block, never prose


def test_a_broken_notebook_is_unreadable(tmp_path: Path) -> None:
    from rag.reader.formats import UnreadableFile

    (tmp_path / "bad.ipynb").write_text('{"cells": [', encoding="utf-8")
    with pytest.raises(UnreadableFile, match="not a Jupyter notebook"):
        chunks_of("bad.ipynb", tmp_path)


def test_a_notebook_saved_as_one_line_of_json_is_unreadable_not_empty(tmp_path: Path) -> None:
    # No cell's source sits on lines of its own, so no line could be cited: the user is told
    # so, where the file used to count as empty without a word.
    from rag.reader.formats import UnreadableFile

    nb = {"cells": [{"cell_type": "markdown", "metadata": {},
                     "source": ["# Workers\n", "Workers default to 4."]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 2}
    (tmp_path / "compact.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(UnreadableFile, match="save it again in Jupyter"):
        chunks_of("compact.ipynb", tmp_path)
    (tmp_path / "saved.ipynb").write_text(json.dumps(nb, indent=1), encoding="utf-8")
    assert "Workers default to 4." in chunks_of("saved.ipynb", tmp_path)[0].text


def test_a_minified_page_is_cut_at_its_headings_and_each_piece_bears_its_own(
        tmp_path: Path) -> None:
    # A page written on one line: every section starts inside that line, so the sections
    # (whole lines) would all bear the line's last heading. Pieces are cut at each heading.
    body = "".join(f"<h2>Topic &amp; {n}</h2><p>Setting number{n} defaults to {n * 7} "
                   f"seconds. {'More words about it. ' * 12}</p>" for n in range(12))
    page = ('<html><head><title>Wiki</title></head><body><nav><h2>Menu</h2><a href="/">Home'
            f"</a></nav><h1>Wiki</h1><p>Intro text of the wiki.</p>{body}</body></html>")
    (tmp_path / "wiki.html").write_text(page, encoding="utf-8")
    chunks = chunks_of("wiki.html", tmp_path, max_tokens=120)
    assert chunks[0].heading == "Wiki" and "Intro text" in chunks[0].text
    for n in range(12):
        holding = [c for c in chunks if f"number{n} " in c.text]
        assert [c.heading for c in holding] == [f"Wiki > Topic & {n}"]
    for chunk in chunks:  # each is its columns of the line, and shows some text
        assert chunk.text == page[chunk.start_col:chunk.end_col] and chunk.end_line == 1
        assert search_text(chunk).strip()


def test_html_blocks_keep_their_lines_and_leave_chrome_out() -> None:
    blocks = blocks_of("page.html")
    text = " ".join(b.text for b in blocks)
    for hidden in ("script text", "Navigation chrome", "Copyright footer", "color: red"):
        assert hidden not in text
    found = {(b.kind, b.start, b.end): b for b in blocks}
    assert found[("heading", 10, 10)].path == ("Proxy guide",)
    para = found[("paragraph", 11, 15)]
    assert para.lines[1] == "30 seconds by default." and para.lines[4].startswith("Set a")
    assert found[("item", 17, 18)].text == ("Retries are off unless you enable them in the "
                                            "retry section.")
    assert found[("code", 23, 24)].lines == ("pip install proxy", "proxy --timeout 60")
    row = found[("row", 28, 28)]
    assert row.lines == ("| timeout | 30 |",) and row.header == ("Option", "Default")
    chunks = chunks_of("page.html")
    exact("page.html", chunks)
    assert all("<script>" not in c.text for c in chunks)


def test_plain_text_titles_and_paragraphs() -> None:
    headings = [(b.start, b.level, " > ".join(b.path)) for b in blocks_of("notes.txt")
                if b.kind == "heading"]
    assert headings == [(2, 1, "Field Notes"), (8, 1, "1. Installation"),
                        (12, 2, "1. Installation > Batteries"),
                        (19, 2, "1. Installation > 1.1 Advanced setup")]
    found = {(b.kind, b.start, b.end) for b in blocks_of("notes.txt")}
    assert {("paragraph", 5, 6), ("item", 15, 16), ("item", 17, 17)} <= found
    exact("notes.txt", chunks_of("notes.txt"))


def test_long_sections_split_inside_the_files_lines() -> None:
    for rel in ("guide.rst", "page.html", "notes.txt", "demo.ipynb"):
        chunks = chunks_of(rel, max_tokens=12)
        assert len(chunks) > 2
        exact(rel, chunks)


def test_rst_code_stays_in_one_chunk_with_what_makes_it_code(tmp_path: Path) -> None:
    # A chunk is quoted from its own lines: code without the directive (or the "::") above
    # it would read as an indented paragraph, and be quoted as prose.
    page = ("Setup\n=====\n\n" + "Some words about the setup of the app here. " * 6 + "\n\n"
            ".. code-block:: python\n   :caption: app.py\n\n   app = Flask(__name__)\n"
            "   app.run()\n\n" + "More words about what the app does next here. " * 6 +
            "\n\nRun it like this::\n\n   $ flask run\n   * Running on port 5000\n")
    (tmp_path / "page.rst").write_text(page, encoding="utf-8")
    chunks = chunks_of("page.rst", tmp_path, max_tokens=40)
    assert len(chunks) > 2
    quoted = [(b.kind, b.lines) for c in chunks for b in quote_blocks(c)]
    assert ("code", ("app = Flask(__name__)", "app.run()")) in quoted
    assert ("code", ("$ flask run", "* Running on port 5000")) in quoted
    assert not any(kind != "code" and any("flask run" in line or "app.run" in line
                                          for line in lines) for kind, lines in quoted)


def test_an_rst_literal_wrapped_onto_the_next_line_reads_as_code(tmp_path: Path) -> None:
    page = ("Ports\n=====\n\nYou may see one of these:\n\n"
            "-   ``OSError: [Errno 98] Address already in use``\n"
            "-   ``OSError: [WinError 10013] An attempt was made to access a socket\n"
            "    in a way forbidden by its access permissions``\n")
    (tmp_path / "ports.rst").write_text(page, encoding="utf-8")
    items = [b.lines for c in chunks_of("ports.rst", tmp_path) for b in quote_blocks(c)
             if b.kind == "item"]
    assert items == [("`OSError: [Errno 98] Address already in use`",),
                     ("`OSError: [WinError 10013] An attempt was made to access a socket",
                      "in a way forbidden by its access permissions`")]


def test_notebook_cell_of_a_one_string_source(tmp_path: Path) -> None:
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Title"},
                    {"cell_type": "markdown", "metadata": {}, "source": ["Some words here."]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 2}
    (tmp_path / "one.ipynb").write_text(json.dumps(nb, indent=1), encoding="utf-8")
    text = (tmp_path / "one.ipynb").read_text(encoding="utf-8")
    lines = file_lines(text, "one.ipynb")
    title = lines.index("# Title") + 1
    words = lines.index("Some words here.") + 1
    assert cell_of(lines, title) == (1, 1) and cell_of(lines, words) == (2, 1)


@pytest.mark.parametrize("name", ["flask", "notebooks"])
def test_every_chunk_of_a_real_corpus_is_its_files_lines(name: str) -> None:
    from tests.conftest import corpus_dir

    root = corpus_dir(name)
    formats = folder_formats(root)
    read = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in (".rst", ".ipynb", ".txt"):
            continue
        text = path.read_text(encoding="utf-8-sig")
        chunks = chunk_file(text, rel, formats.reader(rel), max_tokens=220, min_tokens=24,
                            count_tokens=count, visibility=())
        lines = file_lines(text, rel)
        for c in chunks:
            assert span_text(lines, c.start_line, c.end_line, c.start_col, c.end_col) == c.text
            for block in quote_blocks(c):
                assert 0 <= block.first <= block.last < c.end_line - c.start_line + 1
        read += bool(chunks)
    assert read >= 40
