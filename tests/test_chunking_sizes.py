"""Chunk sizes: a long section splits at paragraph, line and word ends to fit the budget,
and a small section merges into the next one (the deepest heading path names the merge)."""

from __future__ import annotations

from rag.reader.chunking import chunk_document, parse_document
from tests.test_chunking import check_invariants, chunk, headings, words


def long_section() -> str:
    paragraphs = [" ".join(f"p{p}w{w}" for w in range(8)) for p in range(10)]
    return "# Guide\n\n## Long\n\n" + "\n\n".join(paragraphs) + "\n"


def test_long_section_splits_on_paragraphs_within_budget() -> None:
    text = long_section()
    chunks = chunk(text, max_tokens=20)
    check_invariants(text, chunks)
    assert len(chunks) > 3
    assert all(words(c.text) <= 20 for c in chunks)
    assert chunks[0].heading == "Guide"
    assert chunks[1].start_line == 3  # the first piece starts at the section's heading
    assert {c.heading for c in chunks[1:]} == {"Guide > Long"}
    lines = parse_document(text).lines
    for c in chunks:  # every piece ends at a paragraph end
        assert c.end_line == len(lines) or not lines[c.end_line].strip()
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip())


def test_a_long_block_quote_splits_between_its_paragraphs() -> None:
    # The Rust book's asides ("> ### The Stack and the Heap") run for many paragraphs, with
    # only ">" between them: cut line by line, every chunk opened mid-sentence.
    paragraphs = [f"> Paragraph {n} says one thing\n> and then another thing." for n in range(6)]
    text = "# Ownership\n\n> ### The Stack and the Heap\n>\n" + "\n>\n".join(paragraphs) + "\n"
    chunks = chunk(text, max_tokens=22)
    check_invariants(text, chunks)
    assert len(chunks) > 2
    for c in chunks:
        assert c.text.split("\n")[-1].endswith(("thing.", "Heap")), c.text
        assert c.text.split("\n")[0].startswith(("# ", "> ### ", "> Paragraph")), c.text


def test_long_paragraph_splits_on_lines_and_long_line_into_pieces() -> None:
    para = "\n".join(f"l{i} a b c" for i in range(10))
    huge = " ".join(["x"] * 50)
    text = f"# A\n\n{para}\n{huge}\nafter line\n"
    chunks = chunk(text, max_tokens=12)
    check_invariants(text, chunks)
    assert all(words(c.text) <= 12 for c in chunks)
    pieces = [c for c in chunks if c.start_line == 13]
    assert len(pieces) == 5 and all(c.start_col is not None for c in pieces)
    assert " ".join(c.text for c in pieces) == huge  # nothing of the line is lost
    assert [c.heading for c in pieces] == ["A"] * 5


def test_section_that_fits_stays_whole_however_long_its_words() -> None:
    text = "# A\n\n" + "x" * 5000 + "\n\n" + "y" * 5000 + "\n"
    assert [(c.start_line, c.end_line) for c in chunk(text, max_tokens=16)] == [(1, 5)]


def test_fence_with_blank_lines_is_not_split_when_paragraphs_allow() -> None:
    fence = "```\nalpha beta gamma\n\ndelta epsilon\n```"
    # Packing by blank lines alone would put the fence's first half after the 4 words.
    text = f"# A\n\n{' '.join(['w'] * 4)}\n\n{fence}\n\n{' '.join(['v'] * 8)}\n"
    chunks = chunk(text, max_tokens=10)
    check_invariants(text, chunks)
    assert any(fence in c.text for c in chunks)


def test_pieces_fit_even_when_the_counter_is_not_additive() -> None:
    def costly_breaks(text: str) -> int:  # e.g. BPE merging across line breaks
        return words(text) + 3 * text.count("\n\n")

    text = long_section()
    chunks = chunk_document(text, "d.md", max_tokens=20, min_tokens=0, count_tokens=costly_breaks)
    check_invariants(text, chunks)
    assert all(costly_breaks(c.text) <= 20 for c in chunks)


def test_counter_is_called_on_blocks_not_characters() -> None:
    calls: list[str] = []
    text = long_section()

    def counting(piece: str) -> int:
        calls.append(piece)
        return words(piece)
    chunk_document(text, "doc.md", max_tokens=20, min_tokens=5, count_tokens=counting)
    assert len(calls) < 3 * text.count("\n\n") + 5


def test_small_section_merges_into_nested_next_section() -> None:
    text = "# Install\n\n## From source\n\nRun make to build the binary from a checkout.\n"
    [merged] = chunk(text, min_tokens=5)
    assert (merged.heading, merged.start_line, merged.end_line) == ("Install > From source", 1, 5)
    assert headings(text, min_tokens=0) == ["Install", "Install > From source"]


def test_merges_chain_and_name_the_deepest_path_covering_them() -> None:
    siblings = "# A\n\n## B\n\nshort\n\n## C\n\none two three four five six\n"
    assert headings(siblings, min_tokens=6) == ["A"]
    nested = "# Install\n\n## From source\n\n### Linux\n\nRun make in a checkout.\n"
    assert headings(nested, min_tokens=10) == ["Install > From source > Linux"]
    mixed = "# A\n\n## B\n\n### C\n\nx\n\n## X\n\n### C\n\none two three four five six\n"
    assert headings(mixed, min_tokens=10) == ["A"]


def test_small_section_stays_alone_when_merge_would_not_fit() -> None:
    text = "# A\n\n## B\n\n" + " ".join(["w"] * 18) + "\n"
    assert headings(text, max_tokens=20, min_tokens=5) == ["A", "A > B"]
