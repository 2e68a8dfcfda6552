"""Markdown's block structure as the parser reads it: what a user notices in chunks,
their heading paths and line ranges, and in the blocks an answer quotes."""

from __future__ import annotations

from rag.reader.chunking import parse_document
from rag.reader.markdown import atx_heading, fence_run, outline
from rag.reader.markup import display_lines
from rag.reader.passages import read_blocks
from tests.test_chunking import check_invariants, chunk, headings


def test_a_setext_heading_names_the_chunk_and_is_no_quotable_prose() -> None:
    text = "Install\n=======\n\nRun the installer.\n\nFrom source\n-----------\n\nBuild it.\n"
    assert headings(text) == ["Install", "Install > From source"]
    blocks = read_blocks(text, first_line_is_file_start=True)
    assert [(b.kind, b.lines, b.heading) for b in blocks] == [
        ("prose", ("Run the installer.",), "Install"),
        ("prose", ("Build it.",), "Install > From source")]


def test_a_fence_inside_a_list_item_is_code_and_its_comments_are_no_headings() -> None:
    text = ("# Setup\n\n1. Install it:\n\n    ```bash\n    # the stable release\n\n\n"
            "    pip install x\n    ```\n\n2. Done.\n")
    chunks = chunk(text, max_tokens=8)
    assert all(c.heading == "Setup" for c in chunks)  # "# the stable release" is code
    code = [b for b in read_blocks(text, True) if b.kind == "code"]
    assert [b.lines for b in code] == [("# the stable release", "", "", "pip install x")]
    assert text.split("\n")[code[0].first] == "    ```bash"


def test_code_in_an_admonition_with_blank_lines_stays_one_code_block() -> None:
    # Two blank lines between definitions (PEP 8) do not end an MkDocs admonition.
    text = ('!!! note "Models"\n    ```python\n    class A:\n        x: int\n\n\n'
            "    class B:\n        y: int\n    ```\n\nAfter.\n")
    found = outline(text.split("\n"))
    assert [(c.first, c.last) for c in found.code] == [(1, 8)]
    assert display_lines(text.split("\n"))[4:8] == ["", "", "class B:", "    y: int"]


def test_a_heading_inside_a_content_tab_or_colon_fence_is_a_heading() -> None:
    tab = '# Page\n\n=== "pip"\n\n    ## With pip\n\n    Run pip.\n'
    assert headings(tab) == ["Page", "Page > With pip"]
    colon = "# Page\n\n:::tip\n\n## Inside\n\n```sh\n# not a heading\n```\n\n:::\n"
    assert headings(colon) == ["Page", "Page > Inside"]


def test_what_is_no_heading_stays_text() -> None:
    # A "#" line in an HTML comment, a link definition over a rule, an underline under a
    # long paragraph, a heading quoted in a block quote, one indented as code.
    text = ("# Page\n\n<!--\nrun it\n# copy the output here\n-->\n\n[x]: https://x.org\n----\n\n"
            "one\ntwo\nthree\nfour\nfive\n---\n\n> ## Quoted\n\n    ## indented code\n")
    assert headings(text) == ["Page"]


def test_line_ranges_hold_their_text_with_cr_bom_and_line_separators() -> None:
    text = "\ufeff# A\r\n\r\nx\u2028y\rz\r\n\r\n## B\r\n\r\n```\r\n# c\r\n```\r\nend\r\n"
    chunks = chunk(text)
    check_invariants(text, chunks)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("A", 1, 3), ("A > B", 5, 10)]
    lines = parse_document(text).lines
    assert [(c.first, c.last) for c in outline(lines).code] == [(6, 8)]


def test_single_line_rules_ask_the_same_parser() -> None:
    assert fence_run("```python") == "```" and fence_run("   ~~~~") == "~~~~"
    assert fence_run("    ```") == "" and fence_run("```a`b") == ""  # code; an info with `
    assert atx_heading("## Name {#id} ##") == (2, "Name")
    assert atx_heading("#5 bolt") is None and atx_heading("    # code") is None


def test_list_items_and_table_rows_are_what_the_parser_reads() -> None:
    """A number ending a wrapped line opens no list ("between 0 and\\n255. If..."), a lazy
    line goes on with its item, an item may hold a quote, and a table is a table only with
    its delimiter row; a piece of a table an earlier chunk began still reads as rows."""
    text = ("A `u8` holds values between 0 and\n255. If you go past it, it overflows.\n\n"
            "- Set `port`\nto listen elsewhere.\n- > Quoted warning.\n\n"
            "| Key | Default |\n| --- | --- |\n| port | 8080 |\n\n"
            "a | b\n\n| host | localhost |\n| user | admin |\n")
    blocks = [(b.kind, b.lines, b.header) for b in read_blocks(text, True)]
    assert blocks == [
        ("prose", ("A `u8` holds values between 0 and",
                   "255. If you go past it, it overflows."), ()),
        ("item", ("- Set `port`", "to listen elsewhere."), ()),
        ("item", ("- > Quoted warning.",), ()),  # (shown without its markers)
        ("row", ("| port | 8080 |",), ("Key", "Default")),
        ("prose", ("a | b",), ()),
        ("row", ("| host | localhost |",), ()), ("row", ("| user | admin |",), ())]


def test_an_html_comment_is_never_quoted_however_many_paragraphs_it_holds() -> None:
    text = ("Shown first.\n\n<!-- A note to maintainers.\n\nAnswer: the password is hunter2."
            "\n\n* an item nobody sees\n-->\n\nShown after.\n")
    assert [b.lines for b in read_blocks(text, True)] == [("Shown first.",), ("Shown after.",)]
