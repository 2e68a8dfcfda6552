"""Abstention: decide from several signals whether the evidence can answer the question.

No single score separates "the docs answer this" from "the docs only share its words":
an unanswerable question about FastAPI still finds FastAPI pages. The decision combines
signals of coverage (the share of the question's content words that the evidence holds),
the best answer passage (its lexical overlap, its heading) and search: how far the best
dense hit stands above the k-th (an answered question has one clear best place; an
unanswered one finds many equally vague ones), and whether search by meaning alone also
ranks the top evidence's section high (an answer's place is found both by its words and
by its meaning; words shared by chance find a place that meaning does not). Then signals
that tell "the docs cover this" from "the docs use these words": the weighted share of
question words the chunks the asker may see lack (a product, tool or option the docs never
name), the names the question asks about that no evidence holds (not those only the
scene it sets uses: the asker's own header or script), the share of the question's
words, weighted by their rarity among those chunks (BM25 IDF), that the single best
passage holds (an answer is one place that names what was asked, not words scattered over
eight chunks), and the best cosine among the passages that can be the kind of answer asked
for: a release-notes entry ("Add Spanish translation for ...") answers "since which
version", not "how do I", and a question asking how many or how long needs a passage that
holds a number. They form a small logistic model fitted
by ``scripts/fit_abstention.py`` with cross-validation and stored as JSON
(``rag/answer/abstention.json`` by default; ``verification.abstention_model`` names another).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from rag.answer.candidates import Passage
from rag.answer.kinds import has_kind
from rag.answer.questions import answer_kinds, asked_text
from rag.answer.scoring import is_release_note
from rag.core.errors import ConfigError
from rag.core.records import Evidence, SearchHit
from rag.core.text import content_words, index_terms, names, tokens
from rag.stores.lexical import bm25_idf

BUNDLED_MODEL = Path(__file__).with_name("abstention.json")
FEATURES = ("union_coverage", "missing_names", "best_lexical", "best_heading", "dense_gap",
            "search_agreement", "absent_share", "best_idf_coverage", "fitting_dense")
MAX_NAMES = 3


def signals(question: str, evidence: Sequence[Evidence], passages: Sequence[Passage],
            dense: Sequence[SearchHit],
            document_frequency: Mapping[str, int] | None = None,
            size: int = 0) -> dict[str, float]:
    """The raw signals for one question (see the module docstring). ``passages``: the
    evidence's passages scored against the question, best first (rag.answer.extractive);
    ``dense``: the best hits of search by meaning alone (DENSE_K), best first;
    ``document_frequency``: how many of the ``size`` chunks the asker may see
    hold each of the question's BM25 words (never counting others, whose words must not
    sway the decision), or None where the index cannot say (every word then weighs 1 and
    none counts as absent)."""
    from rag.verifier.verification import missing_words

    missing = set(missing_words(question, evidence))
    words = content_words(question)
    # The question's BM25 words, each weighed by its rarity in the index.
    counted = document_frequency is not None
    found = {w: document_frequency.get(w, 0) if document_frequency is not None else 1
             for w in dict.fromkeys(index_terms(question))}
    weight = {w: bm25_idf(n, size) if counted else 1.0 for w, n in found.items()}
    total = sum(weight.values()) or 1.0
    best = passages[0] if passages else None
    held = set(index_terms(" ".join([best.text, *(w.text for w in best.window), best.heading]))
               ) if best else set()
    return {
        "union_coverage": 1.0 - len(missing) / len(words) if words else 0.0,
        "missing_names": float(min(MAX_NAMES, len(missing & question_names(question)))),
        "best_lexical": max((p.lexical for p in passages), default=0.0),
        "best_heading": best.heading_match if best else 0.0,
        "dense_gap": dense[0].score - dense[-1].score if dense else 0.0,
        "search_agreement": search_agreement(evidence, dense),
        "absent_share": sum(weight[w] for w, n in found.items() if n == 0) / total,
        "best_idf_coverage": sum(v for w, v in weight.items() if w in held) / total,
        "fitting_dense": max((p.dense for p in fitting(question, passages)), default=0.0),
    }


DENSE_K = 10  # dense_gap: the best dense hit against the k-th


def search_agreement(evidence: Sequence[Evidence], dense: Sequence[SearchHit]) -> float:
    """1 / the rank at which search by meaning alone finds the top evidence's section (its
    file and heading path), 0 when not among its DENSE_K best."""
    if not evidence:
        return 0.0
    place = (evidence[0].chunk.source_path, evidence[0].chunk.heading)
    return next((1.0 / rank for rank, hit in enumerate(dense, 1)
                 if (hit.chunk.source_path, hit.chunk.heading) == place), 0.0)


def fitting(question: str, passages: Sequence[Passage]) -> list[Passage]:
    """The passages that can be the kind of answer the question asks for: no release-notes
    entry unless it asks about versions, and one holding a number (one the question does
    not already say) if it asks how many, how long, what size..."""
    wants = answer_kinds(question)
    asked = set(tokens(question))
    return [p for p in passages
            if ("version" in wants or not is_release_note(p.evidence.chunk.source_path,
                                                           p.heading))
            and ("number" not in wants or has_kind(p, frozenset({"number"}), asked))]


def question_names(question: str) -> set[str]:
    """Content words of the names the question asks about (rag.core.text.names): those of
    its asked sentences (rag.answer.questions.asked_text). A name only its scene uses is
    the asker's own (a header they made up, their script), not one the docs must hold."""
    return {word for name in names(asked_text(question)) for word in content_words(name)}


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
