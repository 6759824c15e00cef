"""The ``values: auto`` selection is the dense Gaussian mechanism in distribution (issue 65, item 1).

``select_values`` noises only the candidates some row holds and draws the empty ones that pass from their law. These
tests run the real function against a dense reference (every candidate noised) and on neighbouring tables. The
guarantee holds for any threshold, so the threshold is lowered to 1 noise sd to make the telling event common:
with the product's z >= 4 the same defect moves probabilities of order 1e-6 (the audit's ``bench.audit`` shows both).
Noise comes from OS entropy; each assertion states its false-alarm rate."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from splice_assets.private import bounds
from splice_assets.schema import parse_schema

DRAWS = 4000
#: 301 candidates (the integers 0..300: beyond ``GRID_LIMIT``, so the column is searched for frequent values).
SPEC = parse_schema({"name": "codes", "version": 1, "n_min": 10, "columns": [
    {"name": "code", "kind": "integer", "bounds": [0, 300], "values": "auto"}]}).columns[0]
SIGMA, Z = 1.0, 1.0
#: 40 codes held by 3 rows each (3 sd above 0, 2 sd above the threshold): almost always more than the cap pass.
HELD = np.arange(200, 240)
TARGET = 100


def _counts(target_rows: int) -> tuple[np.ndarray, np.ndarray]:
    index = np.concatenate([[TARGET], HELD]) if target_rows else HELD
    counts = np.concatenate([[target_rows], np.full(len(HELD), 3)]) if target_rows else np.full(len(HELD), 3)
    return index.astype(np.int64), counts.astype(np.int64)


def _kept(target_rows: int, draws: int) -> list[set[int]]:
    entropy = np.random.default_rng()  # OS entropy, as in a release
    out = []
    for _ in range(draws):
        found = bounds.select_values([_counts(target_rows)], [SPEC], SIGMA, entropy)["code"]
        out.append({int(v) for v in found})
    return out


def _dense(target_rows: int, draws: int, rng: np.random.Generator) -> list[set[int]]:
    """The reference: every one of the 301 candidates noised, the ``MAX_FOUND`` largest above Z sigma kept."""
    counts = np.zeros(301)
    index, held = _counts(target_rows)
    counts[index] = held
    out = []
    for _ in range(draws):
        noisy = counts + SIGMA * rng.standard_normal(301)
        passed = np.flatnonzero(noisy > Z * SIGMA)
        out.append(set(passed[np.argsort(-noisy[passed])][: bounds.MAX_FOUND].tolist()))
    return out


@pytest.fixture()
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounds, "selection_z", lambda candidates: Z)


def _empty_kept(sets: list[set[int]]) -> np.ndarray:
    return np.array([len(s - set(HELD.tolist())) for s in sets], dtype=np.float64)


def test_empty_candidates_are_kept_as_often_as_when_every_candidate_is_noised(low_threshold: None) -> None:
    """The number of kept codes that no row holds: the real selection against the dense reference. Welch's z beyond
    5 has probability 6e-7 when the laws agree; giving the empty codes z sigma and ranking them last (the defect)
    keeps about 0.003 of them per draw against about 2.5, a z of about 60."""
    real = _empty_kept(_kept(0, DRAWS))
    dense = _empty_kept(_dense(0, DRAWS, np.random.default_rng(7)))
    z = (real.mean() - dense.mean()) / math.sqrt(real.var() / DRAWS + dense.var() / DRAWS)
    assert dense.mean() > 1.0
    assert abs(z) < 5.0, (real.mean(), dense.mean())


def _clopper_pearson(hits: int, draws: int, alpha: float) -> tuple[float, float]:
    from scipy.stats import beta

    low = 0.0 if hits == 0 else float(beta.ppf(alpha, hits, draws - hits + 1))
    high = 1.0 if hits == draws else float(beta.ppf(1 - alpha, hits + 1, draws - hits))
    return low, high


def gaussian_delta(epsilon: float, mu: float) -> float:
    """The tight delta(epsilon) of the Gaussian mechanism of sensitivity / sigma = mu (Balle and Wang 2018)."""
    phi = NormalDist().cdf
    return phi(-epsilon / mu + mu / 2) - math.exp(epsilon) * phi(-epsilon / mu - mu / 2)


def test_a_code_held_by_one_row_is_kept_within_the_guarantee_of_one_held_by_none(low_threshold: None) -> None:
    """Neighbouring tables (the target code held by one row, or by none: add-remove, sensitivity 1, mu = 1 / sigma):
    for every epsilon of a grid, P(kept | one row) <= e^eps P(kept | none) + delta(eps), checked with Clopper-Pearson
    bounds at 1e-5 a side (a false alarm with probability below 1e-3 over the grid). The defect never keeps the
    empty code once more than the cap pass, so P(kept | none) is near 0 while P(kept | one row) is about .12: it
    fails at every epsilon from 2 up."""
    one = sum(TARGET in s for s in _kept(1, DRAWS))
    none = sum(TARGET in s for s in _kept(0, DRAWS))
    one_low, _ = _clopper_pearson(one, DRAWS, 1e-5)
    _, none_high = _clopper_pearson(none, DRAWS, 1e-5)
    for epsilon in np.arange(0.5, 6.01, 0.5):
        assert one_low <= math.exp(epsilon) * none_high + gaussian_delta(epsilon, 1.0 / SIGMA), (epsilon, one, none)
    assert one > none  # the event does tell the tables apart: the bound is tested where it binds


def test_the_product_threshold_keeps_empty_candidates_at_their_binomial_rate() -> None:
    """At the product's own threshold (z = 4 for 301 candidates) an empty code passes with probability Phi(-4): over
    20,000 columns of 261 empty codes about 165 pass, distinct, off the held codes and above the threshold; a count
    beyond 6 sd of that (probability about 1e-9) fails. The old rule matched this rate too: it differed only in the
    ranking, which the tests above catch."""
    z = bounds.selection_z(301)
    entropy = np.random.default_rng()
    held = np.sort(HELD)
    counts = 0
    for _ in range(20_000):
        index, _values = bounds._empty_above(held, 301, z, SIGMA, entropy)
        assert not np.isin(index, held).any() and len(set(index.tolist())) == len(index)
        assert np.all(_values > z * SIGMA)
        counts += len(index)
    expected = 20_000 * 261 * NormalDist().cdf(-z)
    assert abs(counts - expected) < 6 * math.sqrt(expected)
