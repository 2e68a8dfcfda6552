"""What a question asks: its content words, the kind of answer it wants, and its parts.

Shared by the extractive answer (rag/answer/extractive.py) and abstention (rag/answer/abstention.py);
words and sentences come from the one text analyser, rag/core/text.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.core.text import query_terms, split_sentences, stem, terms
from rag.reader.passages import FACT

__all__ = ["Part", "answer_kinds", "asked_text", "asks_when", "defined_terms", "question_parts"]


# --- what kind of answer a question asks for --------------------------------------------------

_ASK_CODE = re.compile(r"(?i)^(?:how\b|what\s+(?:option|parameter|setting|argument|command|"
                       r"flag|decorator|function|class|method)|which\s+(?:option|parameter|"
                       r"setting|argument|command|flag|decorator|function|class|method|package)"
                       r"|is\s+there\s+a\s+way|can\s+i\b)|\bhow\s+(?:do|can|should)\b"
                       r"|\bwhat\s+(?:do|should|must)\s+i\s+(?:need\s+to\s+|have\s+to\s+)?"
                       r"(?:install|import|add|run|set|pass|call|type)\b")
_ASK_NUMBER = re.compile(r"(?i)\bhow\s+(?:long|many|much|big|large|often)\b|\bwhat\s+"
                         r"(?:size|port|number|limit|timeout)|\bdefault\b|\bbelow\s+what\b")
# "Does X ...?", "Should I ...?", "Can the latest ...?": answered by a sentence that says
# yes or no (a negation, "must", "only", "always", "instead"), not one that just names the
# topic. "Can I ...?" and "Do I ...?" ask how.
_ASK_POLAR = re.compile(r"(?i)(?:^|[.?!]\s+)(?:should\b|(?:does|do|is|are|can|could|will|would|"
                        r"must|has|have)\b(?!\s+there\s+a\s+way)(?!\s+i\b))")
_ASK_WHY = re.compile(r"(?i)^why\b|\bwhy\s+(?:does|do|is|should|shouldn't|can't)\b")
# "What happens when a request has no Authorization header?": answered by a sentence that
# says what the software then does ("it will respond with a 401"), not one naming the header.
_ASK_EFFECT = re.compile(r"(?i)\bwhat\s+(?:happens|will\s+happen|would\s+happen)\b")
_WHEN = frozenset(stem(w) for w in ("version", "when", "since", "release", "released",
                                    "added", "introduced", "date", "changelog"))


# "What is a leaf bundle?", "What are path operations?", "What does idempotent mean?",
# "What does the base option do?": the answer is the sentence that says what the thing is.
_ASK_DEFINITION = re.compile(
    r"(?i)^\s*(?:what(?:'s|\s+is|\s+are)\s+(?:an?\s+|the\s+)?(?P<what>[^?,]+?)"
    r"|what\s+does\s+(?P<mean>[^?,]+?)\s+(?:mean|do)|define\s+(?P<define>[^?,]+?))\s*\??\s*$")
DEFINED_WORDS = 5  # "What is X?" asks for a definition when X is a name this short


def defined_terms(question: str) -> frozenset[str]:
    """The stemmed words of the thing a "what is X?" question asks to define; empty when
    the question asks something else."""
    match = _ASK_DEFINITION.match(question)
    if not match:
        return frozenset()
    name = next(g for g in match.groups() if g)
    return frozenset(terms(name)) if len(name.split()) <= DEFINED_WORDS else frozenset()


def asks_when(question: str) -> bool:
    """The question asks for a version or a date (or names one)."""
    return bool(FACT.search(question)) or bool(_WHEN & set(query_terms(question)))


def answer_kinds(question: str) -> frozenset[str]:
    """What the question asks for: code (how do I...), a number, a version, a reason, a
    definition (what is X?), an effect (what happens if...?)."""
    kinds = set()
    asked = split_sentences(question.strip())  # "Nginx strips the prefix. What option...?"
    if any(_ASK_CODE.search(sentence) for sentence in asked):
        kinds.add("code")
    if _ASK_NUMBER.search(question):
        kinds.add("number")
    if asks_when(question):
        kinds.add("version")
    if any(_ASK_WHY.search(sentence) for sentence in asked):
        kinds.add("reason")
    if _ASK_EFFECT.search(question):
        kinds.add("effect")
    if defined_terms(question):
        kinds.add("definition")
    if _ASK_POLAR.search(question):
        kinds.add("polar")
    return frozenset(kinds)


# --- a question in parts -----------------------------------------------------------------------

_PART_BREAK = re.compile(
    r"(?i),?(?<!\s)\s+(?:and|or|but)\s+(?=(?:how|what|which|where|when|why|who|can|could|will|"
    r"would|is|are|does|do|did|should|since)\b)")
MAX_PARTS = 3


@dataclass(frozen=True)
class Part:
    """One thing a question asks ("and which version added it?"): its words and kinds."""

    text: str
    terms: tuple[str, ...]
    kinds: frozenset[str]


def asked_text(question: str) -> str:
    """What a question asks, without the scene it sets: its sentences that end in "?" when
    others set the scene ("I add a custom X-Request-ID header, but the browser can't read
    it. What do I need to configure?"), else the whole question."""
    sentences = split_sentences(question.strip())
    asked = [s for s in sentences if s.endswith("?")]
    return " ".join(asked) if asked and len(asked) < len(sentences) else question


def question_parts(question: str) -> list[Part]:
    """The parts of a question that asks several things, or [] when it asks one. Parts
    are the sentences that end in "?" and their clauses joined by "and how", "and
    which"...; sentences that set the scene are context, not parts. A clause without a
    content word of its own ("Why not, and how do I fix it?") asks about that scene, so
    it takes the scene's words; with no scene, it is no part."""
    sentences = split_sentences(question.strip())
    scene = " ".join(s for s in sentences if not s.endswith("?"))
    found = []
    for asked in sentences:
        if not asked.endswith("?"):
            continue
        for piece in _PART_BREAK.split(asked):
            words = query_terms(piece) or query_terms(scene)
            if words:
                found.append(Part(piece, tuple(words), answer_kinds(piece)))
    return found[:MAX_PARTS] if len(found) > 1 else []
