"""Text analysis shared by every stage that compares words: lexical search, the support
check and extractive scoring all read text through these functions, so "the same word"
means the same thing in each of them.

* :func:`tokens`: NFKC-normalised, case-folded words; code identifiers, numbers and
  versions are kept whole (``max_tokens``, ``app.get``, ``8080``, ``v1.2.3``).
* :func:`normalise`: a light, predictable plural fold (``ports`` -> ``port``).
* :func:`stem`: the Snowball English stemmer (PyStemmer) for ranking, where recall matters
  more than predictability.
* :data:`STOPWORDS`: function words and answer boilerplate, which prove nothing.
* :func:`leads_in`: whether a paragraph ends by introducing what follows it.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Function words and answer boilerplate: they match anything, so they prove nothing.
_STOPWORD_TEXT = """
a about above after again against all also am an and any are as at be because been before
being below between both but by can cannot could did do does doing done down during each
either else etc even ever every few for from further get gets got had has have having he
her here hers herself him himself his how however i if in into is it its itself just let
like may me might more most must my myself neither no nor not now of off often on once
only or other others otherwise our ours ourselves out over own per rather same shall
she should since so some such than that the their theirs them themselves then there
therefore these they this those through thus to too under until up upon us use used uses
using very via was we were what when where whether which while who whom whose why will
with within without would yes yet you your yours yourself yourselves
don doesn didn isn aren wasn weren won wouldn shouldn couldn hasn haven hadn ll ve re
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# A word, or a code identifier / number kept whole: max_tokens, app.get, 8080, v1.2.3.
_TOKEN = re.compile(r"[^\W_](?:[\w.\-/:]*[^\W_])?|_\w+")
_PARTS = re.compile(r"[^\W_]+")
_POSSESSIVE = re.compile(r"'s\b")


def normalise(word: str) -> str:
    """Fold plurals (and a final 'e', so cache/caches/match/matches pair up).

    Numbers and code identifiers (anything not purely alphabetic) are kept as they are.
    """
    if not word.isalpha() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 3 and word.endswith("e") and not word.endswith("ee"):
        word = word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """Case-folded words and whole identifiers, in order, possessive 's dropped."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    return _TOKEN.findall(_POSSESSIVE.sub("", text))


def words(text: str) -> list[str]:
    """:func:`tokens` with plurals folded, stopwords kept."""
    return [normalise(t) for t in tokens(text)]


_LABEL_WORD = re.compile(r"e\d+|evidence")


def content_words(text: str) -> set[str]:
    """Folded words that can carry a claim: no stopwords, single letters or label words."""
    # Stopwords are matched before stemming: stemmed, "does" or "those" would slip through.
    # Label words are not content: "Evidence E1" says nothing the evidence could support.
    return {
        normalise(t)
        for t in tokens(text)
        if t not in STOPWORDS and (len(t) > 1 or t.isdigit()) and not _LABEL_WORD.fullmatch(t)
    }


# A camelCase identifier (devDependencies, envPrefix, TemplateResponse) and its humps.
_CAMEL = re.compile(r"\b[A-Za-z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b")
_HUMP = re.compile(r"[A-Z]?[a-z0-9]+")


def camel_words(text: str) -> list[str]:
    """The case-folded words of the camelCase identifiers in ``text`` (``devDependencies``
    -> ``dev``, ``dependencies``); tokens() keeps such an identifier whole."""
    return [h.lower() for name in _CAMEL.findall(text) for h in _HUMP.findall(name)]


def parts(word: str) -> list[str]:
    """The alphanumeric pieces of an identifier: ``fastapi-cli`` -> ``fastapi``, ``cli``."""
    return _PARTS.findall(word)


@lru_cache(maxsize=1)
def _stemmer():  # type: ignore[no-untyped-def]
    import Stemmer  # PyStemmer: Snowball stemmers in C

    return Stemmer.Stemmer("english")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Snowball English stem of one lower-case word; identifiers and numbers unchanged."""
    if not word.isalpha():
        return word
    return str(_stemmer().stemWord(word))


def word_count(text: str) -> int:
    """Words as a reader counts them: whitespace-separated, code included, a code fence
    (a run of backticks) not."""
    return sum(1 for word in text.split() if word.strip("`"))


# "...can be set to `'json'`:" or, as some docs write it, "For example, the following
# configuration...": a paragraph that ends so introduces the code block or list after it.
def leads_in(text: str) -> bool:
    """Whether text ends by introducing what follows: in ":" or in an ellipsis after a word
    (closing code, emphasis, brackets or quotes may stand between them)."""
    text = text.rstrip()
    if text.endswith(":"):
        return True
    for ellipsis in ("...", "…"):
        if text.endswith(ellipsis):
            word = text[:-len(ellipsis)].rstrip("`*_)]'\"")
            return bool(word) and word[-1].isalnum()
    return False
