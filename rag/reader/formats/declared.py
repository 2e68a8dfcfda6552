"""Visibility a file that has no front matter declares in its own syntax.

- reStructuredText and plain text: a field ``:visibility: staff, ops`` among the fields at
  the top of the file (the docinfo place: before the first paragraph that is not a field,
  a comment or a title).
- HTML: ``<meta name="visibility" content="staff, ops">``.

Read so that no mistake makes a file public: any mention of visibility in those places
that does not name groups cleanly, or more than one, raises UnclearVisibility, and the
indexer leaves the file out (as rag.reader.visibility does for front matter).
"""

from __future__ import annotations

import re
import unicodedata

from rag.reader.visibility import UnclearVisibility, group_names

_HEAD_LINES = 64
_FIELD = re.compile(r"^\s*:([^:\s][^:]*):(?:\s+(.*))?$")
_META = re.compile(r"<meta\b[^>]*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"""(?<![\w:-])([\w:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().strip()


def declared_visibility(lines: list[str], *, html: bool) -> tuple[str, ...]:
    """Groups the file's own visibility field names; () when it names none."""
    found = _meta(lines) if html else _fields(lines)
    if not found:
        return ()
    if len(found) > 1:
        raise UnclearVisibility("visibility is declared more than once")
    return group_names(found[0])


def _fields(lines: list[str]) -> list[str]:
    values: list[str] = []
    head = lines[:_HEAD_LINES]
    for n, line in enumerate(head):
        stripped = line.strip()
        if not stripped or stripped.startswith("..") or _rule(stripped):
            continue
        field = _FIELD.match(line)
        if field is None:
            if "visibility" in _fold(stripped) and stripped.startswith(":"):
                raise UnclearVisibility("a visibility field at the top cannot be read")
            if not values and n + 1 < len(head) and _rule(head[n + 1].strip()):
                continue  # the page's title, which the fields may follow
            break  # the first line of text: the fields at the top are over
        if "visibility" in "".join(ch for ch in _fold(field[1]) if ch.isalnum()):
            values.append(field[2] or "")
    return values


def _rule(line: str) -> bool:
    """A title's underline or overline: three or more of one punctuation mark."""
    return len(line) >= 3 and len(set(line)) == 1 and not line[0].isalnum()


def _meta(lines: list[str]) -> list[str]:
    values: list[str] = []
    for tag in _META.findall("\n".join(lines)):
        attributes = {_fold(m[1]): m[2] or m[3] or m[4] for m in _ATTRIBUTE.finditer(tag)}
        if "visibility" in _fold(attributes.get("name", "")):
            values.append(attributes.get("content", ""))
    return values
