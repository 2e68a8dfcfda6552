"""scripts/fit_abstention.py: the fitting and cross-validation it reports, on known data."""

from __future__ import annotations

import importlib.util

import numpy as np

from tests.conftest import REPO

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


def test_folds_are_stratified_and_cover_every_case() -> None:
    _, y = _data(separation=0.0)
    folds = fit_abstention.folds(y, 5, np.random.default_rng(0))
    assert sorted(np.concatenate(folds).tolist()) == list(range(len(y)))
    assert all((y[f] == 0).sum() == 3 for f in folds)
