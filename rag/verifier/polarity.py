"""What a sentence asserts and what it denies, word by word, so that a statement and the
lines that back it can be compared clause by clause rather than by one "is it negated?"
bit (which a long passage with one "not" somewhere, or "not enabled" for "disabled",
defeats).

* A negation cue ("not", "no", "never", "-n't", "cannot", "without", "instead of", ...)
  *denies* the first content word after it (the head of what it negates: "not a *fixed*
  part", "don't *specify* a port"), and *reaches* every word after it up to the end of its
  clause; a content word no cue reaches is *asserted*. A clause that ends in "not" ("...,
  but content authors are not.") denies its own words; a cue with nothing after it in its
  clause ("unless it says otherwise.") negates nothing.
* A statement *contradicts* a passage when one denies a word the other asserts and does
  not reach with any cue (so "uv creates one; you don't need to create one" is no
  contradiction of "you don't have to create one"), or when one asserts a word of an
  antonym pair (enabled/disabled, required/optional, before/after, ...) where the other
  has only the opposite word.

Words are compared through their Snowball stems (:func:`rag.core.text.stem`), so
"defined" and "define" are one word.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from rag.core.text import content_words, stem, tokens

_CONTRACTIONS = re.compile(r"(?i)\b(?:can[\u2019']t|won[\u2019']t|(\w+)n[\u2019']t)\b")
# A code span (its words count, a cue inside it does not), a cue, a clause end (a mark
# before a space or the end, so "app.get" and "3.11" are no end), or a word. A bare
# "instead" ("and instead run one process") asserts what follows; "instead of" denies it.
_PIECES = re.compile(
    r"(?P<code>(?<!`)(`+)(?!`)(?P<inner>.*?[^`])\2(?!`))"
    r"|(?P<cue>(?i:\b(?:not|no|never|none|nothing|neither|nor|cannot|without|nobody|"
    r"nowhere|rather than|instead of|otherwise)\b))"
    r"|(?P<end>[,;:.!?()\[\]](?=\s|$))"
    r"|(?P<word>[^\W_](?:[\w.\-/:]*[^\W_])?|_\w+)")
# Verbs a cue passes over to reach what it negates: "does not need a name", "you don't
# want workers" deny the name and the workers.
_LIGHT = frozenset(stem(w) for w in ("need", "want", "necessarily", "really", "actually"))
# Words that state the opposite of each other in docs: settings, requirements, order,
# access, truth values. Each pair is read through its stems.
ANTONYMS = (("enabled", "disabled"), ("enable", "disable"), ("required", "optional"),
            ("mandatory", "optional"), ("before", "after"), ("allowed", "forbidden"),
            ("allow", "disallow"), ("allow", "deny"), ("include", "exclude"),
            ("included", "excluded"), ("true", "false"), ("always", "never"),
            ("public", "private"), ("visible", "hidden"), ("synchronous", "asynchronous"),
            ("sync", "async"), ("first", "last"), ("minimum", "maximum"),
            ("increase", "decrease"), ("add", "remove"), ("start", "stop"),
            ("show", "hide"), ("accept", "reject"), ("internal", "external"),
            ("absolute", "relative"), ("local", "remote"), ("ascending", "descending"),
            ("older", "newer"), ("earlier", "later"), ("explicit", "implicit"),
            ("supported", "unsupported"), ("valid", "invalid"), ("safe", "unsafe"),
            ("success", "failure"), ("lowercase", "uppercase"), ("inside", "outside"),
            ("automatically", "manually"), ("static", "dynamic"))


@dataclass(frozen=True)
class Polarity:
    """The stems of a text's words: the content words asserted (no cue reaches them) and
    denied (the first after a cue), every word a cue reaches (after it, in its clause),
    every word; and how many cues it has."""

    asserted: frozenset[str]
    denied: frozenset[str]
    reached: frozenset[str]
    words: frozenset[str]
    cues: int
    shown: dict[str, str] = field(default_factory=dict, compare=False)  # stem -> word

    def word(self, stemmed: str) -> str:
        """The word as the text writes it."""
        return self.shown.get(stemmed, stemmed)


def _spelled_out(text: str) -> str:
    """"don't" as "do not", "can't" as "cannot", "won't" as "will not"."""
    def spell(m: re.Match[str]) -> str:
        low = m.group(0).lower()
        if low.startswith("can"):
            return "cannot"
        if low.startswith("won"):
            return "will not"
        return f"{m.group(1)} not"

    return _CONTRACTIONS.sub(spell, text)


def polarity(text: str) -> Polarity:
    """What ``text`` asserts and denies (see the module docstring)."""
    asserted: Counter[str] = Counter()
    denied: set[str] = set()
    reached: set[str] = set()
    words: set[str] = set()
    shown: dict[str, str] = {}
    clause: list[str] = []  # content words of the clause so far, before any cue
    cue, head, cues = "", False, 0
    for m in _PIECES.finditer(_spelled_out(text)):
        if m.group("cue"):
            cue, head, cues = m.group("cue").lower(), True, cues + 1
            continue
        if m.group("end"):
            if head and cue == "not":
                # "..., but content authors are not.": it denies its clause's words.
                denied.update(clause)
                reached.update(clause)
                asserted.subtract(clause)
            elif head:
                cues -= 1  # "unless it says otherwise.": no word is negated
            cue, head, clause = "", False, []
            continue
        piece = m.group("inner") or m.group("word") or ""
        every = [stem(t) for t in tokens(piece)]
        for t, stemmed in zip(tokens(piece), every, strict=True):
            shown.setdefault(stemmed, t)
        words.update(every)
        if cue:
            reached.update(every)
        found = [stem(t) for t in tokens(piece) if content_words(t)]
        if not found:
            continue
        if not cue:
            asserted.update(found)
            clause.extend(found)
            continue
        if head and not (m.group("word") and found[0] in _LIGHT):
            denied.update(found)  # a code span is one head, all its words
            head = False
    if head and cue == "not":  # the text ends in "not"
        denied.update(clause)
        reached.update(clause)
        asserted.subtract(clause)
    elif head:
        cues -= 1
    return Polarity(frozenset(w for w, n in asserted.items() if n > 0), frozenset(denied),
                    frozenset(reached), frozenset(words), cues, shown)


@lru_cache(maxsize=1)
def _opposites() -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for a, b in ANTONYMS:
        out.setdefault(stem(a), set()).add(stem(b))
        out.setdefault(stem(b), set()).add(stem(a))
    return {k: frozenset(v) for k, v in out.items()}


def contradiction(statement: str, passage: str, where: str = "its quote") -> str | None:
    """How the statement says the opposite of the passage, or None (see the module
    docstring): the reason names the word, and the passage as ``where``."""
    said, held = polarity(statement), polarity(passage)
    for word in sorted((said.denied - said.asserted) & (held.asserted - held.reached)):
        return f"it denies {said.word(word)!r}, which {where} states"
    for word in sorted((held.denied - held.asserted) & (said.asserted - said.reached)):
        return f"it states {said.word(word)!r}, which {where} denies"
    opposites = _opposites()
    for word in sorted(said.words - said.reached):
        for other in sorted(opposites.get(word, ())):
            if other in held.words - held.reached and word not in held.words \
                    and other not in said.words:
                return f"it says {said.word(word)!r} where {where} says {held.word(other)!r}"
    # Negated where the passage is not: unless it says the opposite word ("is not
    # enabled", "is disabled").
    if said.cues and not held.cues and not any(
            opposites.get(word, frozenset()) & held.words for word in said.denied):
        return f"it negates what {where} states"
    return None
