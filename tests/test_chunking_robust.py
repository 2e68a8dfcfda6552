"""Hostile and generated inputs: results stay exact, and nothing takes quadratic time."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag.reader.chunking import chunk_document, parse_document
from rag.reader.markdown import MAX_HEADING_CHARS
from rag.reader.visibility import UnclearVisibility
from tests.test_chunking import check_invariants, chunk, headings, words

SPACES = " " * 40_000


def test_heading_lines_that_used_to_backtrack_give_the_right_names() -> None:
    # `# a`, 40,000 spaces, `b` held the old heading pattern for over a minute.
    [only] = chunk(f"# a{SPACES}b\n\ntext\n")
    assert only.heading is not None and only.heading.startswith("a   ")
    assert len(only.heading) == MAX_HEADING_CHARS and only.heading.endswith("…")
    assert headings(f"# a{SPACES}#\n\ntext\n") == ["a"]  # closing run after the blanks
    assert headings(f"# a{SPACES}x#\n\ntext\n")[0].endswith("…")  # `x#` is not a closing run
    assert headings(f"# Install{SPACES}{{#install}}\n\ntext\n") == ["Install"]
    assert headings(f"# Install{SPACES}{{#install\n\ntext\n")[0].startswith("Install ")
    assert headings(f"Para\n-{SPACES}-{SPACES}x\n") == ["Doc"]  # neither break nor underline
    assert headings(f"# A\n\nPara\n\n-{SPACES}-{SPACES}-\nMore\n") == ["A"]  # a break


def test_long_paragraph_over_setext_underline_is_not_a_heading() -> None:
    para = "\n".join(f"line {i} of a long paragraph" for i in range(4000))
    text = f"# Top\n\n{para}\n===\n\nafter\n"
    chunks = chunk(text, max_tokens=200, min_tokens=24)
    check_invariants(text, chunks)
    assert {c.heading for c in chunks} == {"Top"}
    # The chunks file stays proportional to the input (it was 200x before).
    size = sum(len(json.dumps(c.to_dict())) for c in chunks)
    assert size < 3 * len(text)
    assert headings("Two line\nheading\n===\n\nbody\n") == ["Two line heading"]


# Generated Markdown-ish documents built from the constructs the chunker treats specially.
_PIECES = st.sampled_from([
    "# Title", "## Sub { #sub }", "### Deep ###", "#", "####### not", "    # code",
    "Setext", "===", "---", "- item", "> quote", "```", "~~~~", "```python", "# in fence?",
    "---\ntitle: T\n---", "+++\ntitle = 'T'\n+++", "[ref]: /url \"t\"", "<!-- c", "-->",
    "<!-- one -->", "{{< tabs >}}", "{{% /note %}}", "{{</* x */>}}", "!!! note \"N\"",
    "    indented body", ":::tip T", ":::", "<Tabs>", "import A from 'a'", "",
    "Plain words here.", "First. Second! Third? " * 12, "x" * 300, "a\rb", "\t tab",
])


def _document(parts: list[str], crlf: bool) -> str:
    text = "\n".join(parts)
    return text.replace("\n", "\r\n") if crlf else text


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(_PIECES, max_size=40), crlf=st.booleans(),
       max_tokens=st.integers(5, 60), min_tokens=st.integers(0, 30),
       path=st.sampled_from(["a.md", "b/index.mdx"]))
def test_generated_documents_keep_the_chunk_contract(
    parts: list[str], crlf: bool, max_tokens: int, min_tokens: int, path: str
) -> None:
    text = _document(parts, crlf)
    try:
        chunks = chunk_document(text, path, max_tokens=max_tokens, min_tokens=min_tokens,
                                count_tokens=words)
    except UnclearVisibility:
        # Refused, never chunked as public: only a front-matter block that does not parse.
        assert parse_document(text).front_matter_error is not None
        return
    check_invariants(text, chunks)  # exact text, inside the file, ordered, no overlap
    for c in chunks:
        assert words(c.text) <= max_tokens
        assert c.heading and len(c.heading) <= 8 * (MAX_HEADING_CHARS + 3)
        assert "\r\n" not in c.text


@settings(max_examples=25, deadline=5000)
@given(unit=st.sampled_from([" ", "\t", "#", "-", "=", "{", "{#", "[a]:", "<!--", "{{<",
                             "`", "*", "!!! ", ". ", "a "]),
       prefix=st.sampled_from(["# a", "- ", "", "[x]: /y", "Para\n", "!!! note"]),
       suffix=st.sampled_from(["b", "#", "}", "", "-->", ">}}"]))
def test_pathological_lines_finish_and_stay_exact(unit: str, prefix: str, suffix: str) -> None:
    text = prefix + unit * 20_000 + suffix + "\n\nafter\n"
    chunks = chunk(text, max_tokens=50, min_tokens=5)
    check_invariants(text, chunks)
    assert all(words(c.text) <= 50 for c in chunks)
