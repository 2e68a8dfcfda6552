"""Real-doc pages: titles as heading roots, lines without content, one-paragraph lines."""

from __future__ import annotations

import json

import pytest

from rag.core.records import Chunk
from rag.indexer.indexing import embed_text
from rag.reader.chunking import chunk_document, file_title, parse_document
from tests.test_chunking import check_invariants, chunk, headings, words


@pytest.mark.parametrize("front", [
    "---\ntitle: Install guide\n---\n", "+++\ntitle = 'Install guide'\n+++\n",
])
def test_front_matter_title_is_the_root_of_every_heading_path(front: str) -> None:
    text = front + "Intro text.\n\n## From source\n\nRun make.\n\n### Linux\n\napt.\n"
    assert headings(text) == [
        "Install guide", "Install guide > From source", "Install guide > From source > Linux",
    ]


def test_an_h1_equal_to_the_title_is_not_repeated() -> None:
    text = "---\ntitle: Install  Guide\n---\n# install guide\n\nText.\n\n## Linux\n\napt.\n"
    assert headings(text) == ["install guide", "install guide > Linux"]
    other = "---\ntitle: Setup\n---\n# Installing\n\nText.\n"
    assert headings(other) == ["Setup > Installing"]


def test_a_heading_reads_as_the_page_shows_it_entities_and_escapes_decoded() -> None:
    text = ("# pnpm config\n\nIntro.\n\n## &lt;URL&gt;&#58;_authToken\n\nA token.\n\n"
            "## Use `&lt;b&gt;` for bold \\* not stars\n\nBold.\n")
    assert headings(text) == ["pnpm config", "pnpm config > <URL>:_authToken",
                              "pnpm config > Use `&lt;b&gt;` for bold * not stars"]


def test_a_version_marker_before_the_first_heading_dates_the_whole_page() -> None:
    text = ("---\ntitle: Configure roles\n---\n\n{{< new-in 0.153.0 />}}\n\nDefaults.\n\n"
            "## Role settings\n\nThe weight of a role.\n\n{{< new-in 0.155.0 />}}\n\nLater.\n")
    assert headings(text) == ["Configure roles (New in 0.153.0)",
                              "Configure roles (New in 0.153.0) > Role settings"]
    # under a heading, a marker dates only its section's text, not the page
    later = "---\ntitle: Roles\n---\n\nIntro.\n\n## New\n\n{{< new-in 0.1.0 />}}\n\nText.\n"
    assert headings(later) == ["Roles", "Roles > New"]


def test_title_is_embedded_and_cut_when_very_long() -> None:
    [only] = chunk("---\ntitle: Ports\n---\nThe server listens on 8080.\n")
    assert only.heading == "Ports" and embed_text(only).startswith("Ports\n")
    long_title = "x" * 500
    [long] = chunk(f"---\ntitle: {long_title}\n---\nBody.\n")
    assert long.heading is not None and len(long.heading) == 200 and long.heading.endswith("…")


@pytest.mark.parametrize("path, name", [
    ("getting-started.md", "Getting started"), ("docs/content_management.mdx", "Content management"),
    ("guide/_index.md", "Guide"), ("cli/README.md", "Cli"), ("index.md", "Index"),
])
def test_file_name_is_the_root_without_title_or_h1(path: str, name: str) -> None:
    assert file_title(path) == name
    assert [c.heading for c in chunk("Text.\n\n## Part\n\nMore.\n", path)] == [name, f"{name} > Part"]


def test_page_with_an_h1_but_no_title_puts_text_before_it_under_it() -> None:
    assert headings("A badge line.\n\n# Guide\n\nText.\n\n## Part\n\nMore.\n") == [
        "Guide", "Guide", "Guide > Part",
    ]
    [merged] = chunk("Badge.\n\n# Guide\n\nText here.\n", min_tokens=5)
    assert merged.heading == "Guide"


@pytest.mark.parametrize("text", [
    "---\ntitle: x\n---\n\n[a]: /a\n[b]: https://b.example 'B'\n",
    "<!--\nA comment\nover lines\n-->\n\n<!-- another -->\n",
    "# A\n\nText.\n\n<!-- trailing comment -->\n\n[ref]: /ref\n",
])
def test_link_definitions_comments_and_front_matter_never_form_a_chunk(text: str) -> None:
    chunks = chunk(text)
    check_invariants(text, chunks)
    for c in chunks:
        shown = [line for line in c.text.split("\n") if line.strip()]
        assert shown and not all(line.startswith(("[", "<!--", "-->")) or line.endswith("-->")
                                 for line in shown), c.text


def test_markup_inside_a_section_is_spanned_and_lines_still_count() -> None:
    text = "# A\n\nFirst [x][ref].\n\n[ref]: /x\n<!-- note -->\n\nSecond.\n\n[tail]: /t\n"
    [only] = chunk(text)
    assert (only.start_line, only.end_line) == (1, 8)
    assert "[ref]: /x" in only.text and "[tail]" not in only.text
    assert "[ref]: /x" not in embed_text(only) and "note" not in embed_text(only)


def test_embedded_text_has_no_generator_markup_but_chunk_text_is_the_file() -> None:
    text = ("# Install\n\n{{< tabs >}}\n!!! note \"Requires Go\"\n    Version 1.22 or later.\n"
            "{{< /tabs >}}\n")
    [only] = chunk(text)
    assert only.text == text.rstrip("\n").rsplit("\n", 1)[0]  # the closing shortcode trimmed
    assert embed_text(only) == "Install\n# Install\n\nRequires Go\nVersion 1.22 or later."


def sentences(n: int, words_each: int = 6) -> str:
    return " ".join(" ".join(f"{'S' if w == 0 else 's'}{i}w{w}" for w in range(words_each)) + "."
                    for i in range(n))


def test_one_paragraph_line_is_split_at_sentence_ends() -> None:
    line = sentences(40)  # 240 words on one line
    text = f"# Guide\n\n{line}\n\nNext paragraph.\n"
    chunks = chunk(text, max_tokens=50)
    check_invariants(text, chunks)
    pieces = [c for c in chunks if c.start_line == 3]
    assert len(pieces) >= 5
    assert all(words(c.text) <= 50 and c.text.endswith(".") for c in pieces)
    assert all(c.start_line == c.end_line == 3 and c.start_col is not None for c in pieces)
    assert " ".join(c.text for c in pieces) == line
    assert {c.heading for c in pieces} == {"Guide"}


def test_one_sentence_over_the_budget_is_cut_at_spaces_and_a_huge_word_anywhere() -> None:
    line = " ".join(f"w{i}" for i in range(100))
    pieces = chunk(line + "\n", max_tokens=30)
    check_invariants(line, pieces)
    assert len(pieces) >= 4 and all(words(c.text) <= 30 for c in pieces)
    assert " ".join(c.text for c in pieces) == line

    def chars(text: str) -> int:  # a counter under which one long word is over budget
        return len(text) // 10

    word = "x" * 1000
    cut = chunk_document(word, "w.md", max_tokens=20, min_tokens=0, count_tokens=chars)
    check_invariants(word, cut)
    assert "".join(c.text for c in cut) == word and all(chars(c.text) <= 20 for c in cut)


def test_pieces_of_a_line_round_trip_and_old_records_still_load() -> None:
    [piece, *_] = chunk(sentences(20) + "\n", max_tokens=30)
    data = piece.to_dict()
    assert data["start_col"] == 0 and data["end_col"] == len(piece.text)
    assert Chunk.from_dict(json.loads(json.dumps(data))) == piece
    [whole] = chunk("# A\n\nShort.\n")
    assert "start_col" not in whole.to_dict()
    assert Chunk.from_dict(whole.to_dict()) == whole


def test_pieces_of_a_line_never_merge_with_neighbours() -> None:
    text = f"# A\n\nTiny.\n\n{sentences(12)}\n\nTiny too.\n"
    chunks = chunk(text, max_tokens=30, min_tokens=25)
    check_invariants(text, chunks)
    assert chunks[0].text == "# A\n\nTiny." and chunks[-1].text == "Tiny too."
    assert all(c.start_col is not None for c in chunks[1:-1])
    assert " ".join(c.text for c in chunks[1:-1]) == parse_document(text).lines[4]


def test_quoting_a_piece_of_a_line_checks_that_piece_against_the_file(tmp_path) -> None:
    from rag.verifier.verification import quote_lines

    page = tmp_path / "page.md"
    page.write_text(f"# Guide\n\n{sentences(20)}\n", encoding="utf-8")
    pieces = [c for c in chunk(page.read_text(encoding="utf-8"), max_tokens=30)
              if c.start_col is not None]
    second = pieces[1]
    cols = (second.start_col, second.end_col)
    quoted, note = quote_lines(tmp_path, "page.md", 3, 3, second.text, cols=cols)
    assert (quoted, note) == ([(3, second.text)], None)
    _, whole_line = quote_lines(tmp_path, "page.md", 3, 3, second.text)  # no cols: no match
    assert whole_line is not None
    page.write_text(page.read_text(encoding="utf-8").replace("S5w0", "Edited"), encoding="utf-8")
    assert quote_lines(tmp_path, "page.md", 3, 3, second.text, cols=cols)[1] == (
        "page.md has changed since it was indexed; re-index to see the lines")


def test_a_cross_reference_anchor_line_is_markup_so_the_next_heading_opens_its_chunk() -> None:
    text = ("# Strict mode\n\nStrict mode is off by default, and most models keep it so.\n\n"
            "[](){#strict-mode-with-field}\n\n## At the field level\n\n"
            "Set `strict=True` on one field to make only that field strict.\n")
    chunks = chunk(text, max_tokens=20)
    check_invariants(text, chunks)
    field = next(c for c in chunks if "strict=True" in c.text)
    assert field.start_line == 7 and field.heading == "Strict mode > At the field level"
    assert "{#strict-mode-with-field}" not in embed_text(chunks[0])


@pytest.mark.parametrize("lead_in", ["The `mode` argument can be set to `'json'` for JSON types:",
                                     "The `mode` argument can be set to `'json'` for JSON types..."])
def test_a_lead_in_stays_in_the_piece_with_what_it_introduces(lead_in: str) -> None:
    # A lead-in ends in ":" or, in some docs (HTTPX, SvelteKit), in an ellipsis.
    text = ("# Dumping\n\n" + "Some words about dumping models to Python objects. " * 2 + "\n\n"
            f"{lead_in}\n\n"
            "```python\nprint(m.model_dump(mode='json'))\nprint(m.model_dump(mode='python'))\n"
            "```\n\nAfter the example.\n")
    chunks = chunk(text, max_tokens=30)
    check_invariants(text, chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3), (5, 12)]
    # Packed greedily, the first piece would end with the lead-in (lines 1-5) and the code
    # it introduces would open the next one.
