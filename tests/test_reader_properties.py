"""Property tests of the readers other than Markdown: any file built from a format's pieces
chunks into its own lines, in order, under its own headings.

Markdown's properties are in tests/test_chunking_robust.py. Each generated file is written
to disk and read back as a folder would be; a chunk's text must be exactly its span of the
file as stored, chunks must not overlap, and a heading path holds only the file's titles,
never a menu's, a script's or a code block's.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag.reader.chunking import span_text
from rag.reader.formats import cell_place, chunk_file, file_lines, folder_formats
from tests.test_formats import count

FAST = settings(max_examples=120, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
SIZES = st.integers(12, 80)


def chunks_in(root: Path, rel: str, text: str, max_tokens: int) -> tuple[list, list[str]]:
    (root / rel).write_text(text, encoding="utf-8")
    chunks = chunk_file(text, rel, folder_formats(root).reader(rel), max_tokens=max_tokens,
                        min_tokens=8, count_tokens=count, visibility=())
    return chunks, file_lines(text, rel)


def check_spans(chunks: list, lines: list[str], names: set[str]) -> None:
    previous = (0, 0)
    for chunk in chunks:
        assert span_text(lines, chunk.start_line, chunk.end_line, chunk.start_col,
                         chunk.end_col) == chunk.text
        start = (chunk.start_line, chunk.start_col or 0)
        assert start >= previous, "chunks overlap or are out of order"
        previous = (chunk.end_line, chunk.end_col or 1 << 30)
        assert chunk.heading is None or set(chunk.heading.split(" > ")) <= names


# --- HTML ---------------------------------------------------------------------------------

_HTML_PIECES = st.sampled_from([
    "<h2>Alpha</h2>", "<h3>Beta &amp; gamma</h3>", "<h2>Delta <code>x</code></h2>",
    "<p>Some words. More words here.</p>", "<p>" + "Long sentence of words. " * 20 + "</p>",
    "<ul><li>One item.</li><li>Two items.</li></ul>", "<pre>code line\nnext line</pre>",
    "<nav><h2>Menu</h2><a>Home</a></nav>", "<script>var h2 = '<h2>x</h2>';</script>",
    "<table><tr><th>K</th></tr><tr><td>v</td></tr></table>", "<div>Loose text</div>"])


@FAST
@given(parts=st.lists(_HTML_PIECES, min_size=1, max_size=30), minified=st.booleans(),
       max_tokens=SIZES)
def test_any_html_page_chunks_into_its_own_lines_under_its_own_headings(
        tmp_path_factory: pytest.TempPathFactory, parts: list[str], minified: bool,
        max_tokens: int) -> None:
    page = "<html><body><h1>Page</h1>" + ("" if minified else "\n").join(parts) + \
        "</body></html>\n"
    chunks, lines = chunks_in(tmp_path_factory.mktemp("html"), "page.html", page, max_tokens)
    check_spans(chunks, lines, {"Page", "Alpha", "Beta & gamma", "Delta x"})
    for chunk in chunks:
        for tag, name in (("<h2>Alpha", "Alpha"), ("<h3>Beta", "Beta & gamma")):
            # A chunk opening a section is under it (unless small sections merged into it).
            if chunk.text.startswith(tag) and chunk.text.count("<h") == 1:
                assert name in chunk.heading.split(" > ")
        if chunk.start_col is not None:  # a piece of a line is within one section
            # (a menu's or a script's "<h2>" opens none, so only the page's headings count)
            for tag in ("<h2>Alpha", "<h3>Beta", "<h2>Delta"):
                assert chunk.text.find(tag, 1) < 0


# --- reStructuredText ----------------------------------------------------------------------

_RST_PIECES = st.sampled_from([
    "Alpha\n=====", "Beta\n----", "Gamma words\n~~~~~~~~~~~",
    "Some words. More words here.", " ".join(["Long sentence of words."] * 20),
    "- One item.\n- Two items.", "Run this::\n\n    code line\n    Not = a title\n    =====",
    ".. code-block:: python\n\n    print('x')\n    # Fake\n    ------",
    ".. versionadded:: 2.0\n   The ``port`` option.", ".. note::\n\n   Mind the gap.",
    "See :ref:`alpha` and :func:`run`.", ".. unknown-directive:: arg\n\n   Body text.",
    "=====  =====\nKey    Value\n=====  =====\na      b\n=====  =====",
])


@FAST
@given(parts=st.lists(_RST_PIECES, min_size=1, max_size=20), max_tokens=SIZES)
def test_any_rst_file_chunks_into_its_own_lines_under_its_own_titles(
        tmp_path_factory: pytest.TempPathFactory, parts: list[str], max_tokens: int) -> None:
    text = "Page\n####\n\n" + "\n\n".join(parts) + "\n"
    # (any mix of title levels reads: the reader is as tolerant as Sphinx, never UnreadableFile)
    chunks, lines = chunks_in(tmp_path_factory.mktemp("rst"), "page.rst", text, max_tokens)
    check_spans(chunks, lines, {"Page", "Alpha", "Beta", "Gamma words"})
    indexed = " ".join(c.text for c in chunks)
    for piece in ("Some words. More words here.", "Mind the gap.", "print('x')", "Body text."):
        assert piece not in parts or piece.split("\n")[-1] in indexed  # no block is lost


# --- Jupyter notebooks ---------------------------------------------------------------------

_CELLS = st.sampled_from([
    ("markdown", "# Alpha\n\nSome words. More words here."),
    ("markdown", "## Beta\n- One item.\n- Two items."),
    ("markdown", " ".join(["Long sentence of words."] * 20)),
    ("markdown", "Text with \"quotes\", a \\ backslash and a tab\there."),
    ("code", "# Not a heading\nimport os\nprint(os.sep)"),
    ("code", "x = 1"),
    ("raw", "# Raw, never a heading"),
])


@FAST
@given(cells=st.lists(_CELLS, min_size=1, max_size=12), max_tokens=SIZES)
def test_any_notebook_chunks_into_its_own_lines_and_cells(
        tmp_path_factory: pytest.TempPathFactory, cells: list[tuple[str, str]],
        max_tokens: int) -> None:
    makers = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell,
              "raw": nbformat.v4.new_raw_cell}
    book = nbformat.v4.new_notebook(cells=[makers[kind](source) for kind, source in cells])
    text = nbformat.writes(book)  # as Jupyter saves it: indented, one source line per string
    chunks, lines = chunks_in(tmp_path_factory.mktemp("nb"), "book.ipynb", text, max_tokens)
    check_spans(chunks, lines, {"Book", "Alpha", "Beta"})
    for chunk in chunks:  # each chunk opens in a cell that holds its first line
        place = cell_place("book.ipynb", lines, chunk.start_line, chunk.end_line)
        assert place is not None, chunk
        kind, source = cells[place["cell"] - 1]
        opening = next(line for line in chunk.text.split("\n") if line.strip("`\n "))
        assert kind != "raw" and opening.strip() in source
    indexed = " ".join(c.text for c in chunks)
    for kind, source in cells:
        if kind == "code":
            assert source.splitlines()[-1] in indexed  # code cells are indexed


# --- plain text ----------------------------------------------------------------------------

_TEXT_PIECES = st.sampled_from([
    "Alpha\n=====", "Beta\n----", "2.1 Setting up", "3. Usage",
    "Some words. More words here.", " ".join(["Long sentence of words."] * 20),
    "- One item.\n- Two items.", "1. First step.\n2. Second step.",
    "a line\n===", "Short\n" + "-" * 40, "See section 4.2 for more.",
])


@FAST
@given(parts=st.lists(_TEXT_PIECES, min_size=1, max_size=20), max_tokens=SIZES)
def test_any_text_file_chunks_into_its_own_lines_under_its_own_titles(
        tmp_path_factory: pytest.TempPathFactory, parts: list[str], max_tokens: int) -> None:
    text = "\n\n".join(parts) + "\n"
    chunks, lines = chunks_in(tmp_path_factory.mktemp("txt"), "guide.txt", text, max_tokens)
    check_spans(chunks, lines, {"Guide", "Alpha", "Beta", "2.1 Setting up", "3. Usage", "Short"})
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    assert covered >= {n for n, line in enumerate(lines, 1) if line.strip()}  # nothing lost
