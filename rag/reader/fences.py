"""Fenced blocks as the rendered page shows them.

Where a fence closes (backticks and tildes as rag.reader.markdown reads them, and MyST's
colon fences); which lines of a code block the page does not show (whole-line file
includes, and the setup and directives of TypeScript twoslash examples); how a terminal
session's lines read without their colouring tags; and what the page shows for the fence
lines of MyST's admonitions (paired by rag.reader.markdown's parser), whose content is
prose in a box, not code. rag.reader.markup (what is embedded) and rag.reader.passages (what
is quoted) both read fences through this module, so they agree on what a reader sees.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from rag.reader.markdown import MYST_ADMONITIONS, MYST_BOX, Code, fence_run, outline

# A fenced block that shows a terminal session; FastAPI's docs colour its output with
# HTML (rendered by termynal), which a reader never sees as text.
_SESSION_LANGUAGES = frozenset({"console", "shell-session", "terminal"})
_STYLE_TAG = re.compile(r"(?i)</?(?:font|span|u|b|i|strong|em)(?:\s[^<>]*)?>")


def is_session_fence(line: str) -> bool:
    """Whether a fence line opens a terminal-session block (```` ```console ````)."""
    info = line.strip().lstrip("`~").strip().split(maxsplit=1)
    return bool(info) and info[0].lower().strip("{}.") in _SESSION_LANGUAGES


def session_line(line: str) -> str:
    """A line of a terminal-session block as the terminal shows it: colouring tags
    dropped, entities (&quot;) as their characters."""
    if "<" in line:
        line = _STYLE_TAG.sub("", line)
    return html.unescape(line) if "&" in line else line


# TypeScript twoslash markup inside code blocks (see the module docstring).
_TWOSLASH_DIRECTIVE = re.compile(
    r"//\s*@(?:errors|filename|noErrors|noErrorValidation|noErrorsCutted|include|showEmit"
    r"|showEmittedFile|keepNotations|module|target|lib|strict|moduleResolution|jsx"
    r"|esModuleInterop|allowJs|checkJs|types|noImplicitAny|declaration)\b.*"
    r"|//\s*\^[?|]\s*")
_CUT_BEFORE = frozenset({"// ---cut---", "// ---cut-before---"})


def closes_fence(line: str, fence: str) -> bool:
    """Whether the line closes the block its ``fence`` opened (a code block's, or a MyST
    colon fence's)."""
    run = fence_run(line.lstrip()) or _colon_run(line)
    return bool(run) and run[0] == fence[0] and len(run) >= len(fence) \
        and not line.strip()[len(run):].strip()


# MyST directives whose content is prose a reader sees in a box (other directives, such as
# {code-block} python, stay code), and how Sphinx titles the version ones.
_MYST_ADMONITION = re.compile(r"\{(" + "|".join(MYST_ADMONITIONS) + r")\}[ \t]*(.*)")
_VERSION_DIRECTIVES = {"versionadded": "New in version", "versionchanged": "Changed in version",
                       "versionremoved": "Removed in version", "deprecated": "Deprecated since version"}
_DIRECTIVE_OPTION = re.compile(r":[\w-]+:(?:[ \t].*)?")


def _colon_run(line: str) -> str:
    """The run of colons that opens or closes a MyST colon fence (:::{note} ... :::)."""
    stripped = line.lstrip()
    run = stripped[:len(stripped) - len(stripped.lstrip(":"))]
    return run if len(run) >= 3 and len(line) - len(stripped) <= 3 else ""


def myst_admonitions(lines: Sequence[str], boxes: Sequence[Code] | None = None,
                     ) -> dict[int, str]:
    """The fence lines of MyST admonitions and the option lines after an opener, each with
    what the page shows in its place ("" for none, an opener's argument or version title).
    Their content lines are not in the map: they are prose. ``boxes``: the admonitions as
    rag.reader.markdown's outline found them (read here when not given)."""
    if boxes is None:
        boxes = outline(list(lines)).boxes if any(MYST_BOX.search(line) for line in lines) \
            else []
    shown: dict[int, str] = {}
    for box in boxes:
        m = _MYST_ADMONITION.fullmatch(box.info)
        if m is None:
            continue
        title = _VERSION_DIRECTIVES.get(m[1], "")
        shown[box.first] = f"{title} {m[2].strip()}:" if title else m[2].strip()
        i = box.first
        while i + 1 < min(len(lines), box.last + (0 if box.closed else 1)) \
                and _DIRECTIVE_OPTION.fullmatch(lines[i + 1].strip()):
            i += 1
            shown[i] = ""
        if box.closed:
            shown[box.last] = ""
    return shown


def hidden_code_lines(body: Sequence[str]) -> frozenset[int]:
    """Which lines of a code block's body (the lines between its fences, 0-based) the page
    does not show: whole-line file includes and TypeScript twoslash markup."""
    hidden = {j for j, line in enumerate(body) if is_include(line, in_code=True)
              or _TWOSLASH_DIRECTIVE.fullmatch(line.strip())}
    marks = {j: line.strip() for j, line in enumerate(body) if "---cut" in line}
    if not marks:
        return frozenset(hidden)
    cut = max((j for j, m in marks.items() if m in _CUT_BEFORE), default=-1)
    hidden.update(range(cut + 1))
    after = min((j for j, m in marks.items() if m == "// ---cut-after---"), default=len(body))
    hidden.update(range(after, len(body)))
    start = -1
    for j, mark in sorted(marks.items()):
        if mark == "// ---cut-start---":
            start = j
        elif mark == "// ---cut-end---" and start >= 0:
            hidden.update(range(start, j + 1))
            start = -1
    return frozenset(hidden)


def is_include(line: str, in_code: bool = False) -> bool:
    """A whole-line file include: ``{* app.py hl[3] *}``, ``{!> app.js!}``, ``--8<-- "x"``;
    in a code block only the last two (``{* x *}`` is a comment there in Smarty)."""
    stripped = line.strip()
    braced = stripped[:2] in (("{!",) if in_code else ("{*", "{!")) \
        and stripped[-2:] == stripped[1] + "}"
    return braced or stripped.startswith("--8<--")
