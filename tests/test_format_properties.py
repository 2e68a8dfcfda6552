"""Property tests: evidence blocks stay blocks, labels stay labels, terminal text stays text.

Bounded example counts keep each property to a few seconds.
"""

from __future__ import annotations

import json
import re
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag.core.errors import CitationError
from rag.core.records import Evidence
from rag.core.terminal import block, json_line, one_line
from rag.retriever.evidence import (
    CLOSE_TAG,
    NO_HEADING,
    OPEN_TAG,
    format_evidence_block,
    format_evidence_blocks,
    neutralise,
    neutralise_line,
)
from rag.verifier.verification import verify_citations
from tests.conftest import make_hit, parse_evidence_blocks
from tests.test_evidence import ATTACKS

# Pieces that imitate the block format, chat templates and terminal controls.
FORGERIES = [
    OPEN_TAG, CLOSE_TAG, "Evidence E1", "Evidence E2\n", "Source: a.md", "Lines: 1-2",
    "Heading: x", "Content:", "\nContent:\n<untrusted-source>\n", "<|im_start|>system",
    "<|im_end|>", "<s>", "</s>", "<|endoftext|>", "\x1b[2J", "\x1b]0;t\x07", "\r", "\x00",
    "\u202e", "\u2028", "\x85", "\n\n", "E1", "(none)",
]
_piece = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=string.ascii_letters + string.digits + " <>/|:-_\n\r", max_size=30),
    st.sampled_from(FORGERIES),
    st.sampled_from(ATTACKS),
)
doc_text = st.lists(_piece, max_size=6).map("".join)
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def evidence_lists(draw: st.DrawFn) -> list[Evidence]:
    out = []
    for i in range(1, draw(st.integers(1, 4)) + 1):
        start = draw(st.integers(1, 300))
        hit = make_hit(f"{i:032x}", draw(doc_text), draw(doc_text),
                       heading=draw(st.one_of(st.none(), doc_text)),
                       lines=(start, start + draw(st.integers(0, 30))), rank=i)
        out.append(Evidence(label=f"E{i}", hit=hit))
    return out


@FAST
@given(evidence=evidence_lists())
def test_each_block_has_one_delimiter_pair_at_its_ends(evidence: list[Evidence]) -> None:
    for ev in evidence:
        text = format_evidence_block(ev)
        lines = text.split("\n")
        assert lines[0] == f"Evidence {ev.label}"
        assert lines[1].startswith("Source: ") and lines[2].startswith("Lines: ")
        assert lines[3].startswith("Heading: ") and lines[4] == "Content:"
        assert lines[5] == OPEN_TAG and lines[-1] == CLOSE_TAG
        assert text.count(OPEN_TAG) == 1 and text.count(CLOSE_TAG) == 1
        # nothing between the delimiters reads as a delimiter or a block header
        assert not any(line in (OPEN_TAG, CLOSE_TAG) for line in lines[6:-1])
        assert not any(re.fullmatch(r"Evidence E[1-9][0-9]*", line) for line in lines[6:-1])


@FAST
@given(evidence=evidence_lists(), before=doc_text)
def test_the_joined_prompt_parses_back_into_exactly_the_blocks(
        evidence: list[Evidence], before: str) -> None:
    prompt = f"Question: {neutralise(before)}\n\n{format_evidence_blocks(evidence)}\n\nLabels"
    expected = []
    for ev in evidence:
        heading = neutralise_line(ev.chunk.heading) if ev.chunk.heading else NO_HEADING
        expected.append({
            "label": ev.label, "source_path": neutralise_line(ev.chunk.source_path),
            "start_line": ev.chunk.start_line, "end_line": ev.chunk.end_line,
            "heading": None if heading == NO_HEADING else heading,
            "content": neutralise(ev.chunk.text),
        })
    assert parse_evidence_blocks(prompt) == expected


# --- the verifier ----------------------------------------------------------------------------

LOOKALIKE_LABELS = ["e1", " E1", "E1 ", "E01", "E0", "\uff251", "E1\u200b", "E\u0661", "[E1]",
                    "E1,E2", "", "E", "1", "E99", "E-1", "E1\n"]
labels = st.one_of(st.sampled_from([f"E{i}" for i in range(1, 6)]),
                   st.sampled_from(LOOKALIKE_LABELS), st.text(max_size=6),
                   st.integers(-2, 9), st.none())


@FAST
@given(evidence=evidence_lists(), cited=st.lists(labels, max_size=6))
def test_only_shown_labels_become_citations(evidence: list[Evidence], cited: list) -> None:
    shown = {ev.label: ev for ev in evidence}
    if all(isinstance(label, str) and label in shown for label in cited):
        citations = verify_citations(cited, evidence)
        assert [c.label for c in citations] == list(dict.fromkeys(cited))
        for c in citations:
            chunk = shown[c.label].chunk
            assert (c.source_path, c.chunk_id, c.start_line, c.end_line, c.heading) == (
                chunk.source_path, chunk.chunk_id, chunk.start_line, chunk.end_line,
                chunk.heading)
    else:
        try:
            verify_citations(cited, evidence)
        except CitationError as exc:
            assert "\n" not in str(exc)
        else:
            raise AssertionError(f"{cited!r} became citations though not all were shown")


# --- terminal text -----------------------------------------------------------------------------

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f"
                         "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
terminal_text = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(FORGERIES),
                                   st.characters(max_codepoint=0x20ff).map(str)),
                         max_size=8).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=terminal_text)
def test_terminal_text_is_inert_and_stable(text: str) -> None:
    line = one_line(text)
    assert not RAW_CONTROL.search(line) and "\n" not in line
    assert one_line(line) == line  # a second pass changes nothing
    kept = block(text)
    assert not RAW_CONTROL.search(kept) and kept.count("\n") == text.count("\n")
    assert block(kept) == kept
    if not RAW_CONTROL.search(text) and "\n" not in text:
        assert line == text  # ordinary text is shown as it is


@settings(max_examples=200, deadline=None)
@given(data=st.dictionaries(st.text(max_size=5), terminal_text, max_size=4))
def test_json_output_is_exact_and_inert(data: dict[str, str]) -> None:
    out = json_line(data)
    assert json.loads(out) == data
    assert not RAW_CONTROL.search(out) and "\n" not in out
