"""Titles a quote shows over the blocks they name, though none is a sentence: a content
tab's title (``=== "pip"``, ``/// tab | pip``), a code block's own title in its fence
(``title="app.py"``, VitePress's ``[vite.config.js]``), and a paragraph of a few words over
code ("Bash", "Example", "or"). Without them, an answer through a page's alternatives
shows bare code blocks back to back and cannot say which is for which shell or file.

They are shown only; they never become candidate sentences, so no score changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rag.answer.candidates import Passage
from rag.core.records import Chunk
from rag.reader.inline import clean_inline, show_links
from rag.reader.markup import code_title, tab_title
from rag.reader.passages import Block

__all__ = ["is_label", "shown_label", "titles_of", "titles_over", "with_brought_title"]

TAB_REACH = 4  # a title is shown over a block that starts within this many lines of it
LABEL_WORDS = 3  # a paragraph this short over code is its title


@lru_cache(maxsize=1024)
def titles_of(chunk: Chunk) -> dict[int, str]:
    """The titles in a Markdown chunk (chunk line, 0-based -> the title as shown): each
    content tab's, on the line that opens it, and each titled code block's, on its fence."""
    if chunk.format not in (None, "", "markdown"):
        return {}  # (a notebook's chunk text is its JSON; other readers show titles as text)
    found = {}
    for i, line in enumerate(chunk.text.split("\n")):
        title = tab_title(line) or code_title(line)
        if title:
            found[i] = show_links(clean_inline(title))
    return found


def titles_over(titles: dict[int, str], after: int, first: int) -> dict[int, str]:
    """The titles over a block starting at chunk line ``first``: between line ``after``
    (the block before it) and its first line (a code block's fence) included, in reach."""
    return {line: titles[line] for line in sorted(titles)
            if after < line <= first and line >= first - TAB_REACH}


def with_brought_title(q: Passage, after: Sequence[Block], titles: dict[int, str]) -> str:
    """The passage's quote, with the titles of the code it brings ("...in your mypy config
    file:", then tab "mypy.ini" and its code) put before that code."""
    cut = q.text.find("\n")
    if not q.brings or cut < 0 or not after or after[0].kind != "code":
        return q.text
    opened = titles_over(titles, q.block.last, after[0].first)
    if not opened:
        return q.text
    return f"{q.text[:cut]}\n" + "\n".join(opened.values()) + q.text[cut:]


def shown_label(block: Block) -> str:
    """A paragraph's one line as the page shows it."""
    return show_links(clean_inline(block.lines[0]))


def is_label(block: Block, after: Sequence[Block], mine: Sequence[Passage]) -> bool:
    """Whether a block is a short title over the code right after it ("Bash", "Windows"),
    too short to be a sentence (no passage of ``mine`` is read from it)."""
    return block.kind == "prose" and len(block.lines) == 1 \
        and 0 < len(shown_label(block).split()) <= LABEL_WORDS \
        and bool(after) and after[0].kind == "code" and after[0].first - block.last <= TAB_REACH \
        and not any(q.block == block for q in mine)
