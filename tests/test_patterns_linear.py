"""No pattern in rag/ takes super-linear time: a hostile line of a doc or a question cannot
hold a request.

Every compiled pattern of every module is run on adversarial lines (long runs of the
characters Markdown patterns care about, between typical prefixes and suffixes) of 2,000
and 20,000 characters. Linear work grows about tenfold; quadratic work a hundredfold. A
heading of ``# a``, 600 spaces and ``{#`` once took a single ``POST /ask`` 63 s.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import time

import pytest

import rag

UNITS = [" ", "\t", "#", "-", "=", "{", "{#", "[", "a ", "`", "*", "<", ". ", "a", "1.", "|",
         "\\", ":", "'", '"', "![", "](", "{{<", "_", ", and "]
PREFIXES = ["", "# a", "| "]
SUFFIXES = ["", "{#", "`"]

# Patterns used only anchored (``match`` at a position, or ``fullmatch``): what counts for
# them is one match attempt, not a scan from every position.
ANCHORED = {
    ("rag.reader.inline", "_SHORTCODE_NAME"),  # .match(line, pos) right after a "{{<" opener
    ("rag.reader.markup", "_VERSION_MARKER"),  # .fullmatch of a shortcode's inside
    ("rag.reader.passages", "_DELIMITER_ROW"),  # .match / .fullmatch of a table's second row
    ("rag.reader.passages", "_IMAGE_LINE"),  # .fullmatch of one stripped line
    ("rag.reader.formats.text", "_NUMBERED"),  # .fullmatch of one stripped line
    ("rag.reader.formats.text", "_ITEM"),  # .match at the start of one line
}


def _patterns() -> dict[tuple[str, str], re.Pattern[str]]:
    """Every compiled pattern, once, under the first module that holds it."""
    found: dict[tuple[str, str], re.Pattern[str]] = {}
    seen: set[int] = set()
    for info in sorted(pkgutil.walk_packages(rag.__path__, "rag."), key=lambda i: i.name):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str) \
                    and id(value) not in seen:
                seen.add(id(value))
                found[(module.__name__, name)] = value
    return found


def _run(key: tuple[str, str], pattern: re.Pattern[str], text: str) -> float:
    start = time.perf_counter()
    if key in ANCHORED:
        pattern.match(text)
        pattern.fullmatch(text)
    else:
        for _ in pattern.finditer(text):
            pass
    return time.perf_counter() - start


PATTERNS = _patterns()


def test_the_patterns_are_found() -> None:
    from rag.reader.markup import CODE_SPAN

    assert len(PATTERNS) > 50 and CODE_SPAN in PATTERNS.values()


@pytest.mark.parametrize("key", sorted(PATTERNS), ids=lambda k: f"{k[0]}.{k[1]}")
def test_pattern_time_grows_linearly(key: tuple[str, str]) -> None:
    pattern = PATTERNS[key]
    worst, line = 0.0, ("", "", "")
    for unit in UNITS:
        for prefix in PREFIXES:
            for suffix in SUFFIXES:
                spent = _run(key, pattern, prefix + unit * (2000 // len(unit)) + suffix)
                if spent > worst:
                    worst, line = spent, (prefix, unit, suffix)
    prefix, unit, suffix = line
    small = min(_run(key, pattern, prefix + unit * (2000 // len(unit)) + suffix)
                for _ in range(3))
    large = min(_run(key, pattern, prefix + unit * (20000 // len(unit)) + suffix)
                for _ in range(2))
    # Tenfold the input: linear work takes about 10x; allow noise, never 100x.
    assert large < 0.02 or large < 40 * small, (
        f"{key}: {small * 1000:.1f} ms at 2,000 characters, {large * 1000:.1f} ms at 20,000 "
        f"on {prefix!r} + {unit!r} * n + {suffix!r}")
