"""Who may read a Source, from its front matter, read so that no mistake makes it public.

A file is restricted by front matter ``visibility: [staff, ops]`` (YAML ``---`` or TOML
``+++``; a comma-separated string works too). Authors make mistakes with that line:
a wrong key case, a mapping instead of a list, an empty value, a block that the parser
does not read as front matter at all (a blank line or a space before it, no closing
delimiter, CR-only line endings, JSON front matter). Each of those would leave a plain
parser with no groups, which means public. So this module reads the file twice:

1. Raw: every block at the top of the file that *looks* like front matter, however the
   parser would treat it, is searched for keys that start with "visibility" (any case,
   Unicode compatibility forms folded, invisible format characters removed): the word
   followed by ``:``, ``=``, ``]`` or ``.``, as a YAML, JSON or TOML key or table would
   be. Prose such as ``title: Visibility`` is not a key.
2. Parsed: the front matter the chunker really reads.

When the raw read finds no mention, the file sets no groups (``groups_by_path`` in the
config may still restrict it). When it does, the parsed front matter must hold exactly
one top-level ``visibility`` key, mentioned exactly once, whose value is a non-empty
list of group names (or a comma-separated string of them). Anything else raises
:class:`UnclearVisibility`, and the indexer leaves the file out with one warning line:
never public, and never restricted to groups nobody meant.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

# A group name: letters, digits and a few separators; no spaces, quotes or brackets.
GROUP_NAME = re.compile(r"[^\W_][\w.@+\-]*")
_DELIMITER = re.compile(r"(-{3,}|\+{3,}|\.{3,})")
# A group no user can hold (no group name has a NUL): restricts a file to nobody.
NOBODY = ("\x00nobody",)
_KEY_WORD = "visibility"
_KEY = re.compile(r"(?:^|[\s{\[,\"'])visibility[\w\-]*[\"']?\s*[:=\].]", re.MULTILINE)
# How far down a file a block may start and still be taken for front matter.
_HEAD_LINES = 64


class UnclearVisibility(ValueError):
    """The front matter mentions visibility in a form that does not name groups cleanly."""


def _fold(text: str) -> str:
    """Case-folded NFKC text without format characters (zero-width spaces, BOMs, ...)."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").casefold()


def _bare(line: str) -> str:
    return _fold(line).strip()


def _raw_blocks(text: str) -> list[list[str]]:
    """Blocks at the head of the file that an author may have meant as front matter.

    Lines are split on every line break Python knows (``\\r`` alone included). A block
    opens with a line of only ``---``, ``+++`` or ``{`` (after any blank lines, leading
    spaces or invisible characters) and runs to the next delimiter line (``}`` for
    JSON), or to the end of the file when it never closes. Blocks may follow each other.
    """
    lines = text.splitlines()
    blocks: list[list[str]] = []
    i = 0
    while i < len(lines):
        while i < len(lines) and not _bare(lines[i]):
            i += 1
        if i >= len(lines) or i >= _HEAD_LINES:
            break
        opener = _bare(lines[i])
        json_block = opener.startswith("{")
        if not json_block and not _DELIMITER.fullmatch(opener):
            break
        end = i + 1
        while end < len(lines):
            line = _bare(lines[end])
            if (line.startswith("}") if json_block else bool(_DELIMITER.fullmatch(line))):
                break
            end += 1
        blocks.append(lines[i : end + 1])
        i = end + 1
    return blocks


def _groups(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise UnclearVisibility(f"visibility must be a list of group names, not {value!r:.60}")
    names: list[str] = []
    for item in items:
        if not isinstance(item, str) or not GROUP_NAME.fullmatch(item.strip()):
            raise UnclearVisibility(f"visibility has {item!r:.60}, which is not a group name")
        names.append(item.strip())
    if not names:
        raise UnclearVisibility("visibility is empty")
    return tuple(dict.fromkeys(names))


def read_visibility(text: str, front_matter: Mapping[Any, Any], read: bool) -> tuple[str, ...]:
    """Groups the file's front matter allows; () when it does not mention visibility.

    ``front_matter`` is what the chunker parsed and ``read`` whether it found a front
    matter block at all. Raises UnclearVisibility when visibility is mentioned in any
    form other than one clean, top-level list of group names in that front matter.
    """
    mentions = sum(len(_KEY.findall(_fold("\n".join(block)))) for block in _raw_blocks(text))
    if not mentions:
        return ()
    keys = [k for k in front_matter if _fold(str(k)).strip() == _KEY_WORD]
    if not read or not keys:
        raise UnclearVisibility("visibility is set outside front matter that can be read "
                                "(check the delimiters, line endings and indentation)")
    if mentions > 1 or len(keys) > 1:
        raise UnclearVisibility("visibility is mentioned more than once in the front matter")
    return _groups(front_matter[keys[0]])
