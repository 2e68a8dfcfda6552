"""Whether a statement says what its quote says, in the four ways a wrong claim most often
differs from a right one while keeping most of its words:

* **numbers** (with their units) and **versions**: every number the statement gives is in
  its quote, and a unit written after it follows it there too ("30 seconds", not "30
  minutes"; "3.8", not "3.10"); small number words read as digits ("two" is 2);
* **code identifiers**: every code span, flag, option name, path or dotted, snake_case or
  camelCase name in the statement is in the lines its quote stands on;
* **negation**: the statement does not deny what its quote states, or state what it
  denies, clause by clause, nor say one side of an antonym pair (enabled/disabled,
  required/optional, before/after, ...) where the quote says the other
  (rag.verifier.polarity);
* **names**: a capitalised name inside a sentence (a product, a library, a company; a
  CamelCase word such as "FastAPI" outside a code span is one too) is in
  the evidence the statement cites, its heading and path included (a quote may say "it").

Words are read through :mod:`rag.core.text`, so "the same word" means what it means in
search and in the support score. Each check returns the reason a statement fails, or None.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.core.text import normalise, parts, tokens
from rag.reader.markup import CODE_SPAN
from rag.verifier.polarity import contradiction
from rag.verifier.quotes import quote_words

# ("one", "once" and "single" also stand for no number: "a public one", "make one"; see
# _COUNTING for when "one" counts).
_NUMBER_WORDS = {"zero": "0", "two": "2", "three": "3", "four": "4", "five": "5",
                 "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
                 "eleven": "11", "twelve": "12", "twice": "2",
                 "hundred": "100", "thousand": "1000"}
_UNITS = frozenset(
    ["ms", "millisecond", "s", "sec", "second", "m", "min", "minute", "h", "hr", "hour", "day", "week", "month", "year", "b", "byte", "kb", "kib", "mb", "mib", "gb", "gib", "tb", "k", "px", "em", "rem", "pt", "percent", "%", "character", "char", "line", "item", "request", "worker", "process", "thread", "core", "time"])
_HAS_DIGIT = re.compile(r"\d")
_VERSION = re.compile(r"v?\d+(?:\.\d+)+|v\d+")
# Code as prose writes it: a code span, a flag, or a word with inner dots, slashes,
# underscores, colons or a camelCase hump ("app.get", "content/posts", "max_tokens",
# "baseURL"); abbreviations such as "e.g." are not code.
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
# (A capitalised CamelCase word, "FastAPI", is a name: the name check reads it.)
_CODE_WORD = re.compile(r"(?<![\w`])(?:[A-Za-z_][\w-]*[./:_][\w./:-]*\w|[a-z]+[A-Z]\w*)")
_ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "vs", "a.k.a", "u.s"})
# A capitalised word after a word (not opening a sentence, a list item or a quote).
_NAME = re.compile(r"(?<=[\w,;)] )[A-Z][A-Za-z0-9]+")


def holds_number(text: str) -> bool:
    """Whether the text gives a number or a version (digits; number words aside)."""
    return bool(_HAS_DIGIT.search(text))


# After these, "one" is a count ("at least one resource", "more than one worker").
_COUNTING = frozenset({"least", "most", "exactly", "than"})


def _numeric(text: str) -> list[str]:
    """The text's tokens with number words read as digits."""
    said = tokens(text)
    return ["1" if t == "one" and i and said[i - 1] in _COUNTING else _NUMBER_WORDS.get(t, t)
            for i, t in enumerate(said)]


def _number_parts(words: Sequence[str]) -> list[str]:
    """Every number-bearing piece, so "5-minute" holds 5 and "v3.2" holds v3.2."""
    out: list[str] = []
    for word in words:
        out.append(word)
        out.extend(p for p in parts(word) if p != word)
    return out


_UNIT_WORDS = frozenset(normalise(u) for u in _UNITS)


def _unit_after(words: Sequence[str], i: int) -> str | None:
    if i + 1 < len(words) and normalise(words[i + 1]) in _UNIT_WORDS:
        return normalise(words[i + 1])
    return None


def number_mismatch(statement: str, quote: str, where: str = "its quote") -> str | None:
    """Why the statement's numbers or versions are not its quote's, or None; ``where``
    names the quote in the reason."""
    said, held = _numeric(statement), _numeric(quote)
    have = set(_number_parts(held))
    for i, word in enumerate(said):
        if not _HAS_DIGIT.search(word) or _CODE_WORD.fullmatch(word):
            continue  # code ("http2", "utf-8") is the identifier check's part
        kind = "version" if _VERSION.fullmatch(word) else "number"
        bare = word.removeprefix("v") if kind == "version" else word
        if word not in have and bare not in have and f"v{bare}" not in have:
            return f"the {kind} {word} is not in {where}"
        unit = _unit_after(said, i)
        if unit and not any(w in (word, bare) and _unit_after(held, j) == unit
                            for j, w in enumerate(held)):
            return f"'{word} {said[i + 1]}' is not in {where}"
    return None


def identifiers(text: str) -> list[str]:
    """The code identifiers a text names: code spans, flags and code-shaped words."""
    found = [m.group(2) for m in CODE_SPAN.finditer(text)]
    prose = CODE_SPAN.sub(" ", text)
    found += _FLAG.findall(prose)
    found += [w for w in _CODE_WORD.findall(prose) if w.lower().rstrip(".") not in _ABBREVIATIONS]
    return found


def _holds_run(needle: Sequence[str], hay: Sequence[str]) -> bool:
    size = len(needle)
    return any(list(hay[i:i + size]) == list(needle) for i in range(len(hay) - size + 1))


def identifier_mismatch(statement: str, quote: str, where: str = "its quote") -> str | None:
    """Why a code identifier in the statement is not in its quote, or None. An identifier
    whose marks are part of it (``<!--more-->``, ``--reload``, ``{{< ref >}}``: its words
    alone are not it) must stand in the quote character for character."""
    held = quote_words(quote)
    raw = " ".join(quote.split())
    for name in identifiers(statement):
        needle = quote_words(name)
        marked = " ".join(needle) != " ".join(name.casefold().split())
        if needle and not _holds_run(needle, held) or marked and " ".join(name.split()) not in raw:
            return f"the identifier {name!r} is not in {where}"
    return None


def negation_mismatch(statement: str, quote: str) -> str | None:
    """Why the statement says the opposite of its quote, or None (see rag.verifier.polarity)."""
    return contradiction(statement, quote)


def name_mismatch(statement: str, evidence: str) -> str | None:
    """Why a name in the statement is nowhere in the cited evidence, or None."""
    have = {normalise(w) for w in tokens(evidence)}
    have |= {normalise(p) for w in tokens(evidence) for p in parts(w)}
    for name in _NAME.findall(CODE_SPAN.sub(" ", statement)):
        word = normalise(name.casefold())
        if word not in have:
            return f"the name {name!r} is not in the cited evidence"
    return None


def inconsistency(statement: str, quote: str, evidence: str, lines: str = "") -> str | None:
    """The first way the statement disagrees with its quote (for identifiers, with the
    ``lines`` the quote stands on, when given; for names, with the evidence it cites), or
    None when it agrees in all four. A paraphrase may name an option the quoted line holds
    just outside the words quoted."""
    return (number_mismatch(statement, quote)
            or identifier_mismatch(statement, lines or quote, "its quoted lines" if lines
                                   else "its quote")
            or negation_mismatch(statement, quote) or name_mismatch(statement, evidence))
