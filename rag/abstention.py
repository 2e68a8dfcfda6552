"""Abstention: decide from several signals whether the evidence can answer the question.

No single score separates "the docs answer this" from "the docs only share its words":
an unanswerable question about FastAPI still finds FastAPI pages. The decision combines
signals of retrieval (dense cosine and BM25 score of the best chunk), coverage (share of
the question's content words that one evidence chunk holds) and the best answer sentence
(its cosine, its lexical overlap, its combined score), plus four that tell "the docs
cover this" from "the docs use these words": how far the best dense hit stands above the
k-th (an answered question has one clear best place; an unanswered one finds many equally
vague ones), how many of the best chunks by meaning are also the best by words (search
by meaning and by words agree on where an answer is; on a question the docs do not
cover each finds its own near misses), the share of the question's words, weighted by their rarity in the whole
index (BM25 IDF), that the evidence holds, and the weighted share of question words the
whole index lacks (a product, tool or option the docs never name). They form a small
logistic model fitted
by ``scripts/fit_abstention.py`` with cross-validation and stored as JSON
(``rag/abstention.json`` by default; ``verification.abstention_model`` names another).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from rag.errors import ConfigError
from rag.extractive import Passage
from rag.records import Evidence, SearchHit
from rag.text import content_words

BUNDLED_MODEL = Path(__file__).with_name("abstention.json")
FEATURES = ("dense_top", "lexical_top", "coverage", "union_coverage", "missing_names",
            "best_dense", "best_lexical", "best_score", "best_heading", "dense_gap",
            "idf_coverage", "absent_share", "agreement")
# A name in a question: a capitalised word past the first, or a word with a digit, an
# underscore, a dot or a slash inside (HorizontalPodAutoscaler, pool_size, HTTP/3, 413).
_WORD = re.compile(r"[\w@][\w./@-]*")
MAX_NAMES = 3


def signals(question: str, evidence: Sequence[Evidence], passages: Sequence[Passage],
            dense: Sequence[SearchHit], lexical: Sequence[SearchHit],
            document_frequency: Callable[[str], int] | None = None,
            size: int = 0) -> dict[str, float]:
    """The raw signals for one question (see the module docstring). ``dense``, ``lexical``:
    the best hits of search by meaning (DENSE_K) and by words (AGREE_K), best first;
    ``document_frequency``: how many
    of the index's ``size`` chunks hold a BM25 word, or None where the index cannot say
    (every word then weighs 1 and none counts as absent)."""
    from rag.verification import missing_words, support_score

    best = passages[0] if passages else None
    missing = set(missing_words(question, evidence))
    words = content_words(question)
    dense_top = dense[0].score if dense else 0.0
    lexical_top = lexical[0].score if lexical else 0.0
    by_words = {h.chunk.chunk_id for h in lexical[:AGREE_K]}
    return {
        "dense_top": dense_top,
        "lexical_top": math.log1p(max(lexical_top, 0.0)),
        "coverage": max((support_score(question, [e]) for e in evidence), default=0.0),
        "union_coverage": 1.0 - len(missing) / len(words) if words else 0.0,
        "missing_names": float(min(MAX_NAMES, len(missing & question_names(question)))),
        "best_dense": max((p.dense for p in passages), default=0.0),
        "best_lexical": max((p.lexical for p in passages), default=0.0),
        "best_score": best.score if best else 0.0,
        "best_heading": best.heading_match if best else 0.0,
        "dense_gap": dense_top - dense[-1].score if dense else 0.0,
        "agreement": sum(h.chunk.chunk_id in by_words for h in dense[:AGREE_K]) / AGREE_K,
        **_rarity_signals(question, evidence, document_frequency, size),
    }


DENSE_K = 10  # dense_gap: the best dense hit against the k-th
AGREE_K = 5  # agreement: share of the best k dense hits among the best k lexical ones


def idf(document_frequency: int, size: int) -> float:
    """BM25's inverse document frequency (as bm25s weighs words)."""
    return math.log(1.0 + (size - document_frequency + 0.5) / (document_frequency + 0.5))


def _rarity_signals(question: str, evidence: Sequence[Evidence],
                    document_frequency: Callable[[str], int] | None,
                    size: int) -> dict[str, float]:
    """idf_coverage: IDF-weighted share of the question's BM25 words the evidence holds;
    absent_share: IDF-weighted share of them that the whole index lacks."""
    from rag.lexical import tokenize

    words = list(dict.fromkeys(tokenize(question)))
    if not words:
        return {"idf_coverage": 0.0, "absent_share": 0.0}
    found = {w: document_frequency(w) if document_frequency else 1 for w in words}
    weight = {w: idf(found[w], size) if document_frequency else 1.0 for w in words}
    held: set[str] = set()
    for ev in evidence:
        held.update(tokenize(f"{ev.chunk.heading or ''}\n{ev.chunk.text}"))
    total = sum(weight.values()) or 1.0
    return {
        "idf_coverage": sum(weight[w] for w in words if w in held) / total,
        "absent_share": sum(weight[w] for w in words if found[w] == 0) / total,
    }


def question_names(question: str) -> set[str]:
    """Content words of the names the question uses (see _WORD): what it is about."""
    names: set[str] = set()
    for n, match in enumerate(_WORD.finditer(question)):
        word = match.group().rstrip(".-/")
        inner = word[1:]
        if (n > 0 and any(c.isupper() for c in word)) or any(
                c.isdigit() or c in "_./" for c in inner):
            names |= content_words(word)
    return names


class AbstentionModel(BaseModel):
    """Standardise, weight, sum, squash: answer when the probability reaches threshold."""

    model_config = ConfigDict(extra="forbid")
    features: list[str]
    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    threshold: float = 0.5
    # The embedder whose similarities it was fitted on; empty = any. Under another embedder
    # its cosines mean something else, so the pipeline falls back to the coverage gate.
    embedding_model: str = ""
    fitted_on: list[str] = []
    cv: dict[str, float] = {}

    def probability(self, values: dict[str, float]) -> float:
        """Probability that the evidence answers the question."""
        z = self.bias + sum(
            w * (values.get(name, 0.0) - m) / (s or 1.0)
            for name, m, s, w in zip(self.features, self.mean, self.scale, self.weights))
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))

    def answerable(self, values: dict[str, float]) -> bool:
        return self.probability(values) >= self.threshold


def load_model(path: str = "") -> AbstentionModel:
    """The fitted model at ``path`` (empty: the bundled one); ConfigError if unusable."""
    target = Path(path) if path else BUNDLED_MODEL
    try:
        model = AbstentionModel.model_validate(json.loads(target.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a fitted abstention model"
        raise ConfigError(f"verification.abstention_model: {target}: {reason}") from None
    lengths = {len(model.features), len(model.mean), len(model.scale), len(model.weights)}
    unknown = set(model.features) - set(FEATURES)
    if len(lengths) != 1 or unknown:
        raise ConfigError(f"verification.abstention_model: {target}: features do not match "
                          f"({', '.join(sorted(unknown)) or 'lengths differ'})")
    return model
