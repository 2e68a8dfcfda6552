"""scripts/fit_abstention.py: the fitting and cross-validation it reports, on known data."""

from __future__ import annotations

import importlib.util

import numpy as np

from rag.answer.abstention import search_agreement, signals
from rag.answer.scoring import PassageScorer, is_release_note
from rag.core.records import Evidence, SearchHit
from rag.core.text import index_terms
from rag.indexer.embedding import FakeEmbedder
from rag.stores.lexical import LexicalIndex
from tests.conftest import REPO, make_hit

_spec = importlib.util.spec_from_file_location("fit_abstention",
                                               REPO / "scripts" / "fit_abstention.py")
assert _spec is not None and _spec.loader is not None
fit_abstention = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fit_abstention)


def _data(separation: float, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.array([1.0] * 60 + [0.0] * 15)
    x = rng.normal(size=(75, 3))
    x[:, 0] += separation * y  # only the first signal tells the classes apart
    return x, y


def test_separable_signals_give_clean_cross_validated_abstention() -> None:
    x, y = _data(separation=8.0)
    cv = fit_abstention.cross_validate(x, y, k=5, repeats=3, l2=1.0, seed=0)
    assert cv["abstention"] >= 0.9 and cv["false_abstention"] <= 0.05
    weights = fit_abstention.fit(x, y, 1.0)[2]
    assert abs(weights[0]) > 5 * max(abs(weights[1]), abs(weights[2]))


def test_noise_cannot_look_good_out_of_sample() -> None:
    x, y = _data(separation=0.0)
    cv = fit_abstention.cross_validate(x, y, k=5, repeats=3, l2=1.0, seed=0)
    assert cv["abstention"] < 0.5  # the threshold keeps false abstention low, so little is caught


def test_figures_per_set_come_from_the_same_cross_validation() -> None:
    x, y = _data(separation=8.0)
    sets = np.array(["a"] * 40 + ["b"] * 35)
    cv = fit_abstention.cross_validate(x, y, k=5, repeats=2, l2=1.0, seed=0, sets=sets)
    unanswerable_b = int(((sets == "b") & (y == 0)).sum())  # all 15 unanswerable are in b
    assert unanswerable_b == 15 and cv["abstention b"] == cv["abstention"]
    assert "abstention a" not in cv  # no unanswerable case in "a": nothing to catch
    pooled = (40 * cv["false_abstention a"] + 20 * cv["false_abstention b"]) / 60
    assert abs(pooled - cv["false_abstention"]) < 1e-3


def test_a_set_held_out_is_scored_by_a_model_that_never_saw_it() -> None:
    x, y = _data(separation=8.0)
    sets = np.array(["a", "b"] * 30 + ["a"] * 8 + ["b"] * 7)  # both hold unanswerable cases
    out = fit_abstention.held_out(x, y, sets, k=5, l2=1.0, seed=0)
    assert out["held_out abstention a"] >= 0.9 and out["held_out abstention b"] >= 0.9
    assert out["held_out false_abstention a"] <= 0.1
    noise, _ = _data(separation=0.0)
    shifted = x.copy()
    shifted[sets == "b", 0] = noise[sets == "b", 0]  # in "b" the signal tells nothing
    out = fit_abstention.held_out(shifted, y, sets, k=5, l2=1.0, seed=0)
    assert out["held_out abstention b"] < 0.5 or out["held_out false_abstention b"] > 0.2


def test_folds_are_stratified_and_cover_every_case() -> None:
    _, y = _data(separation=0.0)
    folds = fit_abstention.folds(y, 5, np.random.default_rng(0))
    assert sorted(np.concatenate(folds).tolist()) == list(range(len(y)))
    assert all((y[f] == 0).sum() == 3 for f in folds)


# --- the signals the model reads (rag/answer/abstention.py) -------------------------------------------

DOCS = ["Mount static files with StaticFiles from a folder.",
        "Set the port with --port when you start the server.",
        "Static files are served from the folder you mount."]


def _hits(scores: list[float], ids: str = "abcdefghij") -> list[SearchHit]:
    return [SearchHit(make_hit(i).chunk, s, n + 1) for n, (i, s) in enumerate(zip(ids, scores))]


def _signals(question: str, evidence_text: str, dense: list[float]) -> dict[str, float]:
    index = LexicalIndex.build(DOCS)
    evidence = [Evidence("E1", make_hit("c1", text=evidence_text, heading=None))]
    passages = PassageScorer().passages(question, evidence)
    counts = {w: index.document_frequency(w) for w in index_terms(question)}
    return signals(question, evidence, passages, _hits(dense), counts, index.size)


def test_document_frequency_counts_the_chunks_holding_a_word() -> None:
    index = LexicalIndex.build(DOCS)
    assert index.document_frequency(index_terms("static")[0]) == 2
    assert index.document_frequency(index_terms("port")[0]) == 1
    assert index.document_frequency(index_terms("kubernetes")[0]) == 0


def test_a_word_the_docs_never_use_counts_as_absent() -> None:
    covered = _signals("How do I mount static files?", DOCS[0], [0.8, 0.5])
    unknown = _signals("How do I mount static files on Kubernetes?", DOCS[0], [0.8, 0.5])
    assert covered["absent_share"] == 0.0
    assert unknown["absent_share"] > 0.3  # the rarest word of the question weighs most
    assert unknown["best_idf_coverage"] < covered["best_idf_coverage"] == 1.0


def test_a_name_only_the_scene_uses_is_the_askers_own_not_a_missing_one() -> None:
    # "my Kubernetes cluster" in the scene says what the asker has; asked about, it is
    # what the docs must name.
    own = _signals("My app runs on a Kubernetes cluster. How do I mount static files?",
                   DOCS[0], [0.8, 0.5])
    asked = _signals("How do I mount static files on a Kubernetes cluster?", DOCS[0],
                     [0.8, 0.5])
    assert own["missing_names"] == 0.0 and asked["missing_names"] == 1.0


def test_rare_words_weigh_more_in_what_the_best_passage_holds() -> None:
    # "port" is in one chunk, "static" in two: a passage holding the rarer one covers more.
    rare = _signals("static port", DOCS[1], [0.8])
    common = _signals("static port", "Static assets are kept in one folder.", [0.8])
    assert rare["best_idf_coverage"] > 0.5 > common["best_idf_coverage"] > 0.0


def test_only_the_best_passage_counts_not_words_scattered_over_the_evidence() -> None:
    # Each chunk holds one of the question's two words: together they hold both, but no
    # single place answers "static files on a port".
    index = LexicalIndex.build(DOCS)
    question = "Which port serves static files?"
    scattered = [Evidence("E1", make_hit("c1", text=DOCS[2], heading=None)),
                 Evidence("E2", make_hit("c2", text="The port is printed on start.",
                                         heading=None))]
    together = [Evidence("E1", make_hit("c1", text="Static files are served on the port "
                                        "you pass.", heading=None))]

    def coverage(evidence: list[Evidence]) -> float:
        passages = PassageScorer().passages(question, evidence)
        counts = {w: index.document_frequency(w) for w in index_terms(question)}
        return signals(question, evidence, passages, _hits([0.8]), counts,
                       index.size)["best_idf_coverage"]

    assert coverage(together) == 1.0 > coverage(scattered)


def test_dense_gap_is_the_best_hit_against_the_last() -> None:
    assert _signals("static", DOCS[0], [0.9, 0.7, 0.4])["dense_gap"] == 0.9 - 0.4
    assert _signals("static", DOCS[0], [])["dense_gap"] == 0.0


def test_search_agreement_is_where_search_by_meaning_ranks_the_top_evidence() -> None:
    top = make_hit("c1", text=DOCS[0], heading="Static files")
    evidence = [Evidence("E1", top)]
    other = make_hit("c2", text=DOCS[1], heading="Ports")
    # another chunk of the same section counts as the same place
    same_section = make_hit("c3", text=DOCS[2], heading="Static files")
    assert search_agreement(evidence, [top, other]) == 1.0
    assert search_agreement(evidence, [other, same_section]) == 0.5
    assert search_agreement(evidence, [other]) == 0.0
    assert search_agreement([], [top]) == 0.0


def test_without_word_statistics_no_word_counts_as_absent() -> None:
    evidence = [Evidence("E1", make_hit("c1", text=DOCS[0], heading=None))]
    values = signals("mount static files on Kubernetes", evidence, [], _hits([0.5]))
    assert values["absent_share"] == 0.0


# --- fitting_dense: passages that can be the kind of answer asked for --------------------------

RELEASE_HEADING = "Release Notes > 1.4.0 (2024-02-01) > Translations"


def _fitting(question: str, *chunks: tuple[str, str | None]) -> dict[str, float]:
    evidence = [Evidence(f"E{n}", make_hit(f"c{n}", text=text, heading=heading))
                for n, (text, heading) in enumerate(chunks, 1)]
    passages = PassageScorer(FakeEmbedder()).passages(question, evidence)
    # "best_dense": the best cosine of any passage, fitting or not, to compare with
    return {**signals(question, evidence, passages, _hits([0.5])),
            "best_dense": max((p.dense for p in passages), default=0.0)}


def test_a_release_note_does_not_answer_how_to_do_something() -> None:
    entry = ("Add Spanish translation for the error messages page.", RELEASE_HEADING)
    how = _fitting("How do I translate the error messages into Spanish?", entry)
    assert how["best_dense"] > 0.3 and how["fitting_dense"] == 0.0
    when = _fitting("Since which version are the error messages translated to Spanish?",
                    entry)
    assert when["fitting_dense"] == when["best_dense"] > 0.3
    prose = ("Error messages are translated by passing a locale to the handler.",
             "Handling Errors > Translations")
    assert _fitting("How do I translate the error messages into Spanish?", entry,
                    prose)["fitting_dense"] > 0.0


def test_a_question_asking_how_many_needs_a_passage_with_a_number() -> None:
    question = "How many worker threads does the server start?"
    pool = "The server runs blocking handlers in a pool of worker threads."
    vague = _fitting(question, (pool, "Concurrency"))
    assert vague["best_dense"] > 0.3 and vague["fitting_dense"] == 0.0
    forty = "The server starts 40 worker threads for blocking handlers."
    exact = _fitting(question, (forty, "Concurrency"))
    assert exact["fitting_dense"] == exact["best_dense"] > 0.3
    # a number the question already says is no answer to it
    echo = _fitting("How many of the 40 worker threads does the server start?",
                    ("The server starts the 40 worker threads lazily.", "Concurrency"))
    assert echo["fitting_dense"] == 0.0


def test_release_headings_are_told_from_headings_that_mention_a_version() -> None:
    for heading in ("Release Notes > 0.110.0 (2024-02-24) > Fixes", "v2.3",
                    "Changelog > [1.0.0] - 2017-06-20", "Version 2.1 > Added",
                    "2024-02-24 > Security"):
        assert is_release_note("guide/notes.md", heading), heading
    for heading in ("Python 3.10 and later", "Upgrade to OAuth 2.0 > Tokens", "Intro", ""):
        assert not is_release_note("guide/notes.md", heading), heading
    # a changelog file is release notes under any heading ("Latest Changes")
    assert is_release_note("release-notes.md", "Release Notes > Latest Changes")


def test_the_bundled_model_is_refitted_from_the_signals_in_the_repository() -> None:
    """Reproducible from the repository alone: the recorded signals of every case give the
    bundled model's weights, bias and threshold again, without any docs folder."""
    import json

    from rag.answer.abstention import BUNDLED_MODEL, FEATURES

    bundled = json.loads(BUNDLED_MODEL.read_text(encoding="utf-8"))
    use = [FEATURES.index(name) for name in bundled["features"]]
    sets = fit_abstention.by_set(fit_abstention.read_signals(fit_abstention.SIGNALS), use)
    assert [f"{name} ({len(y)} cases)" for name, _, y in sets] == bundled["fitted_on"]
    x = np.vstack([part for _, part, _ in sets])
    y = np.concatenate([labels for _, _, labels in sets])
    (mean, _, weights, bias), threshold = fit_abstention.final_model(x, y, 3.0, 5, 0)
    assert np.allclose(mean, bundled["mean"], atol=1e-5)
    assert np.allclose(weights, bundled["weights"], atol=1e-5)
    assert abs(bias - bundled["bias"]) < 1e-5 and abs(threshold - bundled["threshold"]) < 1e-5
