"""scripts/first_quote_ceiling.py: its ranking model learns a signal that picks the quote."""

from __future__ import annotations

import importlib.util

import numpy as np

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("first_quote_ceiling",
                                               REPO / "scripts" / "first_quote_ceiling.py")
assert _spec is not None and _spec.loader is not None
ceiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ceiling)


def _cases(n: int, seed: int) -> list[tuple]:
    """Cases of six candidates each; only the third signal tells the right one apart, and
    the rule's first two signals are noise."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        x = rng.normal(size=(6, len(ceiling.SIGNALS)))
        y = np.zeros(6)
        y[rng.integers(6)] = 1.0
        x[:, 2] += 3.0 * y
        cases.append((x, y, x[:, 0] + x[:, 1]))
    return cases


def test_the_fitted_ranking_finds_the_signal_that_the_rule_ignores() -> None:
    w = ceiling.fit(_cases(80, seed=1), l2=0.05)
    held_out = _cases(80, seed=2)
    fitted = np.mean([y[np.argmax(x @ w)] for x, y, _ in held_out])
    rule = np.mean([y[np.argmax(score)] for _, y, score in held_out])
    assert fitted >= 0.8 and rule <= 0.4
    assert abs(w[2]) > 2 * max(abs(w[0]), abs(w[1]))
