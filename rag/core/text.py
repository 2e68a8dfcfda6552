"""The one text analyser: every stage that compares words (lexical search, extractive
scoring, abstention, the support check, the preview of cited lines) reads text through
these functions, so "the same word" means the same thing in each of them.

* :func:`tokens`: NFKC-normalised, case-folded words; code identifiers, numbers and
  versions are kept whole (``max_tokens``, ``app.get``, ``8080``, ``v1.2.3``).
* :func:`names`: the tokens that name something (``HorizontalPodAutoscaler``, ``pool_size``).
* :func:`parts`, :func:`camel_words`: the words an identifier is made of.
* :data:`STOPWORDS`: function words and answer boilerplate, which prove nothing.
* :func:`normalise`: a light, predictable plural fold (``ports`` -> ``port``), for the
  support check (:func:`words`, :func:`content_words`).
* :func:`stem`: the Snowball English stemmer (PyStemmer) for ranking, where recall matters
  more than predictability: :func:`index_terms` (what BM25 counts), :func:`query_terms`
  and :func:`terms` (what extractive scoring matches).
* :data:`SENTENCE_END`, :func:`split_sentences`: where a sentence ends.
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
_POSSESSIVE = re.compile(r"(?i)'s\b")


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


def tokens(text: str, *, fold: bool = True) -> list[str]:
    """Words and whole identifiers, in order, possessive 's dropped; case-folded unless
    ``fold`` is False."""
    text = unicodedata.normalize("NFKC", text)
    if fold:
        text = text.casefold()
    return _TOKEN.findall(_POSSESSIVE.sub("", text.replace("\u2019", "'")))


def names(text: str) -> list[str]:
    """The tokens that name a thing, as written: a capitalised word past the first
    (``HorizontalPodAutoscaler``), or one with a digit, an underscore, a dot or a slash
    past its first character (``pool_size``, ``HTTP/3``, ``413``)."""
    return [word for n, word in enumerate(tokens(text, fold=False))
            if (n > 0 and any(c.isupper() for c in word))
            or any(c.isdigit() or c in "_./" for c in word[1:])]


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


def index_terms(text: str) -> list[str]:
    """What BM25 counts: Snowball stems of the tokens, stopwords dropped; an identifier such
    as ``max_tokens`` or ``app.get`` counts whole and as its parts. A saved lexical index
    holds these words: changing them means bumping rag.stores.lexical.ANALYZER."""
    out: list[str] = []
    for token in tokens(text):
        if token in STOPWORDS:
            continue
        out.append(stem(token))
        pieces = parts(token)
        if len(pieces) > 1:
            out.extend(stem(p) for p in pieces if p not in STOPWORDS)
    return out


# A dotted name's last part that names a file type, not an attribute.
_NOT_ATTRIBUTE = frozenset({"json", "yaml", "toml", "html", "scss", "less", "conf", "lock",
                            "mdx", "tsx", "jsx"})


def _attribute(tok: str) -> str | None:
    """The attribute a qualified name ends in (``templates.TemplateResponse``:
    templateresponse), which docs name on its own; None for a path, URL, file name,
    version or plain word."""
    if "." not in tok or "/" in tok or ":" in tok:
        return None
    last = tok.rsplit(".", 1)[1]
    if len(last) < 4 or not any(c.isalpha() for c in last) or last in _NOT_ATTRIBUTE:
        return None
    return last


def _stems(tok: str) -> list[str]:
    """A token's stem, plus those of a hyphenated word's parts (re-index: re-index, index)
    and the attribute a qualified name ends in."""
    pieces = parts(tok)
    if len(pieces) > 1 and "-" in tok and all(p.isalpha() for p in pieces):
        return ["-".join(stem(p) for p in pieces)] + [
            stem(p) for p in pieces if p not in STOPWORDS and len(p) > 1]
    attribute = _attribute(tok)
    return [stem(tok)] if attribute is None else [stem(tok), stem(attribute)]


def query_terms(text: str) -> list[str]:
    """Stemmed content words of a question, each once, in order."""
    seen: dict[str, None] = {}
    for tok in tokens(text):
        if tok not in STOPWORDS and (len(tok) > 1 or tok.isdigit()):
            seen.update(dict.fromkeys(_stems(tok)))
    return list(seen)


def terms(text: str) -> set[str]:
    """Stemmed content words of any text, as the question's are stemmed; a code identifier
    also counts as the words it is named by, as lexical search counts it
    (``response_model_exclude_unset``: response, model, exclude, unset; ``devDependencies``:
    dev, dependencies), so a passage that names the setting matches a question that asks
    in words. A question's own identifiers stay whole (query_terms): it names the exact
    thing, not its words."""
    found = {s for t in tokens(text) if t not in STOPWORDS for s in _stems(t) + _word_parts(t)}
    return found | {stem(w) for w in camel_words(text) if len(w) > 1 and w not in STOPWORDS}


def _word_parts(tok: str) -> list[str]:
    """The stems of an identifier's word parts (``app.dependency_overrides``: app,
    depend, overrid); none for a plain word, a hyphenated one (see _stems) or a number."""
    pieces = parts(tok)
    if len(pieces) < 2 or "-" in tok and all(p.isalpha() for p in pieces):
        return []
    return [stem(p) for p in pieces if p.isalpha() and len(p) > 1 and p not in STOPWORDS]


# A sentence ends at ".", "!" or "?" before white space and what can open a sentence (a
# capital, a digit, code, a quote, a bracket, emphasis), but never after an abbreviation
# that takes a stop: "names (e.g. `robots.txt`) or ...", "i.e. The", "vs.", "cf.".
SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[eE]\.g\.)(?<!\b[iI]\.e\.)(?<!\bvs\.)(?<!\bcf\.)\s+"
                          r"(?=[A-Z0-9`\"'(\[*_])")


def split_sentences(text: str) -> list[str]:
    """The sentences of a run of text, at :data:`SENTENCE_END`; the white space between
    them dropped, nothing else changed."""
    return SENTENCE_END.split(text)


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
