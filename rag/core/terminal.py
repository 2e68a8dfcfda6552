"""Text for a terminal: document text, paths, headings and model output shown, never obeyed.

Anything a terminal could act on is replaced by a visible escape: C0 and C1 control
characters (ESC, so no CSI or OSC sequence, hyperlink or title change survives; BEL, ``\\r``,
backspace), DEL, Unicode line and paragraph separators, bidirectional overrides and
isolates, and lone surrogates (undecodable bytes in file names). Tabs stay. ``\\n`` stays only
in text that is meant to span lines (``multiline=True``); in a single-line field it shows as
``\\n``, so a heading or a statement cannot forge a line of its own. The output is printable
text that a second pass leaves as it is.

JSON output keeps its data exact: ``json_line`` escapes the same characters as ``\\uXXXX``,
which a JSON reader turns back into the original string.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
_UNSAFE_KEEP_NL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: object) -> str:
    """A single-line field (path, heading, message): nothing in it can act on the terminal."""
    return _UNSAFE.sub(_visible, str(text))


def block(text: object) -> str:
    """Multi-line text: line breaks kept, everything else as in ``one_line``."""
    return _UNSAFE_KEEP_NL.sub(_visible, str(text))


_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")


def json_line(data: Any) -> str:
    """``json.dumps`` without escaping readable Unicode, but with every character a terminal
    could act on written as ``\\uXXXX`` (json.dumps already does so for C0 controls)."""
    text = json.dumps(data, ensure_ascii=False)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
