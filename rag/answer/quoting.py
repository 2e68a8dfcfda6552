"""What a quoted sentence brings with it: the code block, list or table that a sentence
ending in ':' introduces (or a short usage block right after a paragraph), and the quote's
text and last line. rag.reader.prose finds the sentences; rag.answer.scoring scores them."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from rag.core.text import leads_in
from rag.reader.inline import clean_inline, show_links
from rag.reader.passages import BULLET, Block
from rag.reader.prose import Sentence

MAX_CODE_LINES = 10  # non-blank lines of a code block quoted, at most
CODE_WORDS = 60  # a code block or list longer than this is quoted up to here

# A code block this short after a paragraph is quoted with it: a usage line, or a snippet
# that imports, builds and uses one thing.
SHORT_CODE_LINES = 3


def attachment(blocks: Sequence[Block], sentence: Sentence) -> list[tuple[Block, int]]:
    """What a sentence ending in ':' introduces: the next code block, list or table (or a
    prose lead-in ending in ':' plus what that introduces), as (block, lines kept)."""
    if not sentence.ends_block or blocks[sentence.block].kind == "row":
        return []  # ":x:" ends a row, introduces nothing
    if not leads_in(sentence.text):
        # A paragraph followed at once by a short code block shows it ("Create a project.
        # ```hugo new project [path]```"): a usage line, not an example to read on to.
        nxt = blocks[sentence.block + 1] if sentence.block + 1 < len(blocks) else None
        if nxt is not None and nxt.kind == "code" and nxt.first - blocks[sentence.block].last \
                <= 2 and 0 < sum(bool(line.strip()) for line in nxt.lines) <= SHORT_CODE_LINES:
            return [(nxt, len(nxt.lines))]
        return []
    out: list[tuple[Block, int]] = []
    j = sentence.block + 1
    if j < len(blocks) and blocks[j].kind == "prose" and len(blocks[j].lines) <= 2 and \
            leads_in(blocks[j].lines[-1]) and j + 1 < len(blocks) and \
            blocks[j + 1].kind in ("code", "item", "row"):
        out.append((blocks[j], len(blocks[j].lines)))
        j += 1
    if j >= len(blocks) or blocks[j].kind == "prose":
        return out if out else []
    kind = blocks[j].kind
    words = 0
    while j < len(blocks) and blocks[j].kind == kind and words < CODE_WORDS:
        block = blocks[j]
        if kind == "code":
            kept = shown = 0  # lines kept; of them, lines with something on (blank are free)
            for line in block.lines:
                if words >= CODE_WORDS or shown >= MAX_CODE_LINES:
                    break
                words += len(line.split())
                kept += 1
                shown += bool(line.strip())
            out.append((block, kept))
            break
        words += sum(len(line.split()) for line in block.lines)
        out.append((block, len(block.lines)))
        j += 1
    return out


def list_marker(block: Block, sentence: Sentence) -> str:
    """The marker ("* ", "1. ") that a sentence opening a list item is shown with, as the
    items a lead-in brings are; "" for any other sentence."""
    found = BULLET.match(block.lines[0]) if block.kind == "item" else None
    return found.group().strip() + " " if found and sentence.first == block.first else ""


def code_fence(body: Sequence[str]) -> str:
    """The fence that marks a quoted code block as code in the answer's Markdown: three
    backticks, or one more than the longest run that opens a line of the code itself."""
    runs = [len(m.group()) for line in body if (m := _BACKTICKS.match(line.lstrip()))]
    return "`" * max(3, max(runs, default=0) + 1)


_BACKTICKS = re.compile(r"`{3,}")


def _last_shown(lines: Sequence[str]) -> int:
    """How many lines there are up to the last one with something on it."""
    return next((k + 1 for k in range(len(lines) - 1, -1, -1) if lines[k].strip()), 0)


def fenced(lines: Sequence[str]) -> str:
    """A code block's lines as an answer shows them: fenced, without the blank lines at its
    start and end (lines the page does not show, such as twoslash setup, are blank in the
    block); "" when nothing is left."""
    body = list(itertools.dropwhile(lambda line: not line.strip(), lines[:_last_shown(lines)]))
    if not body:
        return ""
    fence = code_fence(body)
    return "\n".join([fence, *body, fence])


def quote(sentence: Sentence, attached: list[tuple[Block, int]]) -> tuple[str, int]:
    """The quote text and its last chunk line; code it brings is fenced (```), so that every
    reader of the answer, the web page's Markdown among them, shows it as code."""
    parts = [sentence.text]
    last = sentence.last
    for block, kept in attached:
        if block.kind == "code":
            shown = block.lines[:kept]
            # the opening fence is block.first; trailing blank lines are not quoted
            last = block.first + _last_shown(shown)
            code = fenced(shown)
            if code:  # (an empty block, all of it hidden, shows nothing)
                parts.append(code)
            if kept >= len(block.lines):
                last = block.last
        else:  # a list item or table row as the page shows its text (entities, tags, links)
            parts.append(show_links(clean_inline(" ".join(block.lines))))
            last = block.last
    return "\n".join(parts), last
