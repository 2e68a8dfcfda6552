"""Whether a passage holds the kind of thing a question asks for: code for "how do I", a
number for "how many", a version for "since when", a yes or no, a reason, an effect, or a
definition of the thing named (rag/answer/questions.py reads what a question asks for)."""

from __future__ import annotations

import re

from rag.answer.candidates import Passage
from rag.core.text import terms as _terms
from rag.core.text import tokens
from rag.reader.passages import BULLET, FACT, NAME_HEADING, is_labelled_fact

__all__ = ["defines_term", "directs", "directs_purpose", "has_kind"]

_CODE_SPAN = re.compile(r"`([^`]+)`")
_REASON = re.compile(r"(?i)\b(?:because|so\s+that|otherwise|to\s+avoid|in\s+order\s+to|"
                     r"that\s+way|this\s+way|which\s+means|as\s+a\s+result|since)\b")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)*\b")
_POLAR = re.compile(r"(?i)\b(?:not|no|never|cannot|must|only|always|instead)\b|n't\b")
_EFFECT = re.compile(r"(?i)\b(?:will|raises?|returns?|responds?|fails?|rejects?|ignored|"
                     r"overrides?|replaced|an\s+error)\b")


def has_kind(p: Passage, wants: frozenset[str], asked: set[str], own: bool = False,
             defines: frozenset[str] = frozenset()) -> bool:
    """Whether the quote (run on through its window, unless own) holds something of a
    wanted kind that the question did not already say; a definition (of the thing named
    by ``defines``) only counts in the passage's own sentence."""
    text = p.text if own else " ".join([p.text, *(w.text for w in p.window)])
    if "code" in wants and ("\n" in text or any(
            not set(tokens(span)) <= asked for span in _CODE_SPAN.findall(text))
            or _named_section(p, asked)):
        return True
    if "number" in wants and any(n not in asked for n in _NUMBER.findall(text)):
        return True
    if "version" in wants and any(f not in asked for f in FACT.findall(text + p.heading)):
        return True
    if "definition" in wants and defines and (defines_term(p.sentence.text, defines)
                                              or _named_section(p, set(), defines)):
        return True
    if "polar" in wants and _POLAR.search(p.sentence.text if own else text):
        return True
    if "effect" in wants and _EFFECT.search(p.sentence.text if own else text):
        return True
    return "reason" in wants and bool(_REASON.search(text))


def _named_section(p: Passage, asked: set[str], defines: frozenset[str] = frozenset()) -> bool:
    """Whether the passage sits in a section named by an identifier the question does not
    say ("## server.port"): on a reference page, what to set is the section's name. With
    ``defines``: named by the thing the question asks to define ("What does the base
    option do?" and "## base"), whose section says what it is."""
    name = p.block.heading.rsplit(" > ", 1)[-1].strip()
    if p.section < 0 or not NAME_HEADING.match(name):
        return False
    if defines:
        return bool(_terms(name)) and _terms(name) <= defines and _opens_section(p)
    return not set(tokens(name.strip("`"))) <= asked


def _opens_section(p: Passage) -> bool:
    """Whether the passage is its section's first sentence of prose (only blank lines, list
    items and values stated alone, such as an option's type and default, lie between it and
    the heading)."""
    lines = p.evidence.chunk.text.split("\n")
    between = lines[p.section + 1:p.sentence.first]
    if p.block.kind != "prose" or any(line.strip() and not BULLET.match(line)
                                      and not is_labelled_fact(line) for line in between):
        return False
    opening = tokens(lines[p.sentence.first])[:2]
    return opening == tokens(p.sentence.text)[:2]


# "A _leaf bundle_ is a directory that...", "leaf bundle: A leaf bundle is...": a sentence
# whose subject names the thing and little else ("Like a leaf, a leaf bundle is..." does
# not say what it is).
_DEFINES = re.compile(r"(?i)^(?P<subject>.{1,80}?)\s+(?:is|are|means|refers\s+to|stands\s+for|"
                      r"represents)\s")
DEFINITION_SUBJECT_WORDS = 8


def defines_term(sentence: str, defines: frozenset[str]) -> bool:
    """Whether the sentence says what the thing named by these (stemmed) words is."""
    match = _DEFINES.match(sentence.replace("*", "").replace("_", " ").replace("`", ""))
    if not match:
        return False
    subject = match.group("subject")
    named = _terms(subject)
    return len(subject.split()) <= DEFINITION_SUBJECT_WORDS and "," not in subject \
        and defines <= named and len(named - defines) <= 1


# A sentence that tells the reader what to do ("you can set `x`", "use `y`") answers a
# how-question; one that only restates the problem, or asks a question, does not.
_DIRECTIVE = re.compile(
    r"(?i)\byou\s+(?:can|could|need\s+to|should|shouldn't|must|have\s+to|only\s+need)\b"
    r"|(?:^|[.:]\s+)(?:use|set|pass|declare|add|import|call|run|install|create)\s"
    r"|\bby\s+(?:setting|passing|using|adding|declaring|calling)\b")
# ..."To stream events, use `yield`": a part that asks how is answered by this form too.
_TO_DO = re.compile(r"(?i)^to\s[^,]{1,80},\s+(?:use|set|pass|declare|add|import|call|run"
                    r"|install|create)\s")


def directs(sentence: str) -> bool:
    """Whether the sentence tells the reader what to do ("you can set `x`", "use `y`")."""
    return bool(_DIRECTIVE.search(sentence))


def directs_purpose(sentence: str) -> bool:
    """Whether the sentence opens with a purpose and then what to do ("To stream events,
    use `yield`")."""
    return bool(_TO_DO.match(sentence))
