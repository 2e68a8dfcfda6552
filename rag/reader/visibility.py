"""Who may read a Source, from its front matter, read so that no mistake makes it public.

A file is restricted by front matter ``visibility: [staff, ops]`` (YAML ``---`` or TOML
``+++``; a comma-separated string works too). Two reads decide, and both must agree:

1. **Parsed** (the authority): the front matter the chunker really reads. Every key it
   holds, at any depth and however it was spelled in the file (escapes such as
   ``"visib\x69lity"``, a YAML alias or merge key, any case, Unicode compatibility forms,
   invisible format characters), is folded and compared with ``visibility``.
2. **Raw** (a second net): every block at the top of the file that *looks* like front
   matter, however the parser would treat it (a blank line or a space before it, no
   closing delimiter, CR-only line endings, JSON), is searched for keys that start with
   "visibility" followed by ``:``, ``=``, ``]`` or ``.``. Prose such as
   ``title: Visibility`` is not a key.

When neither read finds a mention and the front matter parses, the file sets no groups
(``groups_by_path`` or ``default_groups`` in the config may still restrict it). Otherwise
the parsed front matter must hold exactly one ``visibility`` key, at the top level,
mentioned exactly once in the raw text, whose value is a non-empty list of group names
(or a comma-separated string of them). Anything else, and any front-matter block that
does not parse, raises :class:`UnclearVisibility`: the indexer leaves the file out with
one warning line, never public and never restricted to groups nobody meant.

:func:`visibility_warnings` names what is legal but probably a mistake: a key that looks
like ``visibility`` but is not (a typo, a Cyrillic letter), or a second block after the
front matter.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

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


def group_names(value: Any) -> tuple[str, ...]:
    """The group names a visibility value lists (UnclearVisibility when it lists none cleanly)."""
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


class _Parsed(Protocol):
    """What :func:`read_visibility` needs of ``chunking.ParsedDoc``."""

    @property
    def front_matter(self) -> Mapping[Any, Any]: ...
    @property
    def body_start(self) -> int: ...
    @property
    def front_matter_error(self) -> str | None: ...


def _keys(value: Any, depth: int = 0, seen: set[int] | None = None,
          ) -> Iterator[tuple[str, int]]:
    """Every key of a parsed front matter with its depth (0 = top level), folded. Each
    mapping or list is walked once: YAML aliases share (or nest) them, and a document of
    nested aliases would otherwise take exponential time."""
    seen = set() if seen is None else seen
    if depth > 32 or id(value) in seen:
        return
    if isinstance(value, Mapping):
        seen.add(id(value))
        for key, item in value.items():
            yield _fold(str(key)).strip(), depth
            yield from _keys(item, depth + 1, seen)
    elif isinstance(value, list):
        seen.add(id(value))
        for item in value:
            yield from _keys(item, depth + 1, seen)


def _names_visibility(folded_key: str) -> bool:
    return _KEY_WORD in "".join(ch for ch in folded_key if ch.isalnum())


def read_visibility(text: str, doc: _Parsed) -> tuple[str, ...]:
    """Groups the file's front matter allows; () when it does not mention visibility.

    ``doc`` is what the chunker parsed from ``text``. Raises UnclearVisibility when the
    front matter does not parse, or mentions visibility in any form other than one
    clean, top-level list of group names on which the parsed and the raw read agree.
    """
    if doc.front_matter_error is not None:
        raise UnclearVisibility(f"the front matter cannot be read ({doc.front_matter_error})")
    mentions = sum(len(_KEY.findall(_fold("\n".join(block)))) for block in _raw_blocks(text))
    found = [(key, depth) for key, depth in _keys(doc.front_matter) if _names_visibility(key)]
    if not mentions and not found:
        return ()
    top = [k for k in doc.front_matter if _fold(str(k)).strip() == _KEY_WORD]
    if not found or doc.body_start <= 1:
        raise UnclearVisibility("visibility is set outside front matter that can be read "
                                "(check the delimiters, line endings and indentation)")
    if not mentions:
        raise UnclearVisibility("the front matter sets visibility in a form the raw text does "
                                "not show (an escaped, aliased or merged key)")
    if mentions > 1 or len(found) > 1 or len(top) != 1:
        raise UnclearVisibility("visibility is mentioned more than once, or not as one "
                                "top-level key, in the front matter")
    return group_names(doc.front_matter[top[0]])


# Letters that look like Latin ones in "visibility" (Cyrillic, Greek, digits).
_LOOKALIKE = str.maketrans({"\u0456": "i", "\u0131": "i", "\u03b9": "i", "1": "l", "\u0455": "s",
                            "\u0432": "b", "\u0443": "y", "\u0442": "t", "\u04cf": "l",
                            "\u0406": "i", "\u0251": "a", "\u03bd": "v", "\u0475": "v",
                            "|": "l", "!": "i"})
_RAW_KEY = re.compile(r"^[ \t\"'\[{]*([^\s:=\"'\[\]{]{4,40})[\"'\]]?[ \t]*[:=]", re.MULTILINE)


def _near(a: str, b: str, most: int = 2) -> bool:
    """Edit distance of a and b is at most ``most`` (a and b are short)."""
    if abs(len(a) - len(b)) > most:
        return False
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1] <= most


def visibility_warnings(text: str, doc: _Parsed) -> list[str]:
    """Legal front matter that is probably a mistake, one line each (the file stays indexed)."""
    blocks = _raw_blocks(text)
    raw_keys = {_fold(m) for block in blocks for m in _RAW_KEY.findall("\n".join(block))}
    keys = raw_keys | {key for key, _ in _keys(doc.front_matter)}
    out = []
    for key in sorted(keys):
        bare = "".join(ch for ch in key.translate(_LOOKALIKE) if ch.isalnum())
        if not _names_visibility(key) and (bare == _KEY_WORD or _near(bare, _KEY_WORD)):
            out.append(f"front matter key {key!r} looks like 'visibility' but is not one: "
                       "it restricts nothing")
    if len(blocks) > 1:
        out.append("a second front-matter-like block follows the front matter: only the "
                   "first is read")
    return out
