"""A chunk that starts inside a code block: a long fenced block is split between chunks, and
the later chunk, read alone, must not take the block's tail for prose (or its closing fence
for an opening one). rag.reader.passages skips those lines when it reads a chunk's blocks."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.reader.markdown import atx_heading, fence_run
from rag.reader.markup import CODE_SPAN, HTML_TAG

_WORD_TOKEN = re.compile(r"^[A-Za-z][a-z'’-]*[,.;:!?)]?$")
# Markdown that never sits inside a code block: a list item, a table row, an image, a link.
_MARKDOWN_LINE = re.compile(r"^\s*(?:[-*+]\s+\S|\d+[.)]\s+\S|\||!\[|\[[^\]]*\]\()")
_CODE_LINE = re.compile(r"^\s|^[{}\[\]()\"'<>#@/=;]|[{}\[\](),;:]$|\s=\s"
                        r"|^(?:from\s+[\w.]+\s+import|import\s+[\w.]+$|(?:async\s+)?def\s+\w+\("
                        r"|class\s+\w+[(:]|return\b|print\()")
CODE_LIKE_LINES = 2


# What a sentence of prose never holds: an assignment, a call, a type union, an arrow, a
# comment opening an indented line, a keyword argument in brackets.
_CODE_MARK = re.compile(r"\s=\s|\w\(|\s\|\s|->|^\s+#\s|\[\w+=")


def _prose(line: str) -> bool:
    """A line that reads as a sentence: mostly plain words, six or more, no code marks."""
    words = line.split()
    return len(words) >= 6 and sum(map(bool, map(_WORD_TOKEN.match, words))) * 10 >= len(
        words) * 6 and not _CODE_MARK.search(CODE_SPAN.sub("", line))  # spans aside


def _opens_section(line: str) -> bool:
    """A heading at the margin: a chunk that opens with one starts in prose (a "# note" set
    in, under a list item or in a shell script, says nothing)."""
    return not line[:1].isspace() and atx_heading(line) is not None


def _names_language(fence: str) -> bool:
    return bool(fence.strip().lstrip("`~").strip())


def code_continuation(lines: Sequence[str]) -> int:
    """How many lines at the top of a chunk continue a fenced code block that an earlier
    chunk opened (a long block is split between chunks): 0 when the chunk starts in prose.

    A fence that names a language ("```python") only ever opens a block. So when the
    chunk's fences, paired from the top, would close a block with one, the chunk starts in
    code. Otherwise the chunk alone cannot say for sure, and it is read as starting in code
    only when the evidence agrees: its first fence is a bare one, every line before it is
    code-like (at least two), and what follows the fence
    is not code-like (a closing fence is followed by prose; an opening one by code). With
    no fence at all, every line must be code-like. Anything that reads as prose, a list,
    a table or a heading keeps it prose."""
    fences = [i for i, line in enumerate(lines) if fence_run(line.lstrip())]
    end = fences[0] if fences else len(lines)
    if fences and _names_language(lines[end]):
        return 0  # "```python" opens a block
    if any(_names_language(lines[i]) for i in fences[1::2]):
        # Paired from the top, a fence that would close a block names a language, which
        # only an opening fence does: the chunk starts inside a block its first fence closes.
        return end + 1
    before = [line for line in lines[:end] if line.strip()]
    if len(before) < CODE_LIKE_LINES or _opens_section(before[0]) or not all(
            _CODE_LINE.search(line) and not _prose(line) and not _MARKDOWN_LINE.match(line)
            for line in before):
        return 0
    after = next((line for line in lines[end + 1:] if HTML_TAG.sub("", line).strip()), "")
    if after and _CODE_LINE.search(after) and not _prose(after) \
            and not _MARKDOWN_LINE.match(after) and not _opens_section(after):
        return 0  # the fence opens a block: code follows it
    return min(end + 1, len(lines))
