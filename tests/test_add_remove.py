"""The add-remove relation (n private): sensitivity of the released sums and counts, the split of Delta^2, the noisy
row count, the measurement with its ledger entry and public text, and an empirical audit of the mechanism."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_sensitivity_audit import AUDIT_DELTA, AUDIT_EPS, audit_epsilon
from toy import TOY_SCHEMA

from splice_assets.layout import draw_directions, harmonic, layout_for
from splice_assets.measurement import (
    RELATION_ADD_REMOVE,
    RELATION_REPLACE_ONE,
    Measurement,
    pooled_row_count,
)
from splice_assets.private import ledger, measuring
from splice_assets.private.encoding import encode
from splice_assets.private.ledger import BudgetLedger, RelationMismatch
from splice_assets.private.mechanism import (
    DEFAULT_COUNT_SHARE,
    PrivacyParameterError,
    add_noise_joint,
    calibrate,
    query_weights,
    sensitivity,
)
from splice_assets.private.statistics import moment_sums
from splice_assets.release.bundle import privacy_statement

AR = RELATION_ADD_REMOVE
L, K = 12, 5
LAYOUT = layout_for(TOY_SCHEMA)


def toy_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """Cube-encoded toy rows; a quarter of the numeric values sit on its bounds."""
    a = rng.uniform(0, 1, n)
    a[rng.uniform(size=n) < 0.25] = rng.choice([0.0, 1.0])
    table = pd.DataFrame({"a": a, "b": rng.choice(["x", "y", "z"], n), "c": rng.integers(1, 6, n)})
    return encode(table, TOY_SCHEMA)


def released(x: np.ndarray, plan: measuring.MeasurementPlan) -> np.ndarray:
    """f(D) under add-remove as the release path computes it: [S_j / sqrt(j), w c1, w2 c2, wn n]."""
    stats = measuring.exact_statistics(x, plan, LAYOUT)
    root_j = np.sqrt(np.arange(1, plan.k + 1))[:, None]
    return np.concatenate([
        (stats.moments / root_j).ravel(), plan.marginal_weight * stats.marginals, plan.pair_weight * stats.pairs,
        [plan.count_weight * stats.count],
    ])


def toy_plan(epsilon: float = 1.0, relation: str = AR, n: int | None = None, **shares: float):
    return measuring.make_plan(TOY_SCHEMA, n, epsilon, 1e-6, L, K, relation=relation, **shares)


# -- sensitivity and calibration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shares", [{}, {"marginal_share": 0.0, "pair_share": 0.0}, {"marginal_share": 0.3, "pair_share": 0.3}]
)
def test_adding_or_removing_a_row_moves_the_released_vector_by_at_most_delta(shares):
    rng = np.random.default_rng(7)
    plan, cal = toy_plan(**shares)
    corners = encode(pd.DataFrame(
        [(a, b, c) for a in (0.0, 1.0) for b in "xyz" for c in range(1, 6)], columns=["a", "b", "c"]
    ), TOY_SCHEMA)
    worst = 0.0
    for _ in range(20):
        x = toy_rows(rng, int(rng.integers(1, 30)))
        base = released(x, plan)
        extra = np.concatenate([toy_rows(rng, 10), corners])
        for row in extra:  # add a row
            worst = max(worst, np.linalg.norm(released(np.vstack([x, row]), plan) - base) / cal.sensitivity)
        for i in range(len(x)):  # remove a row
            worst = max(worst, np.linalg.norm(released(np.delete(x, i, axis=0), plan) - base) / cal.sensitivity)
    assert worst <= 1.0
    # Histograms and the count are tight (one cell each); moments reach |T_j| = 1 only along theta.
    assert worst > 0.5


def test_shares_split_delta_squared_as_declared():
    C, P = 7, 21
    w, w2, wn = query_weights(0.2, 0.5, L, K, C, P, AR, 0.01)
    total = sensitivity(None, L, K, C, w, P, w2, AR, wn) ** 2
    assert w**2 * C / total == pytest.approx(0.2)
    assert w2**2 * P / total == pytest.approx(0.5)
    assert wn**2 / total == pytest.approx(0.01)
    assert L * harmonic(K) / total == pytest.approx(0.29)
    with pytest.raises(PrivacyParameterError, match="count share must be 0, got 0.01"):
        query_weights(0.2, 0.5, L, K, C, P, RELATION_REPLACE_ONE, 0.01)
    with pytest.raises(PrivacyParameterError, match="count share must be > 0"):
        query_weights(0.2, 0.5, L, K, C, P, AR, 0.0)
    with pytest.raises(PrivacyParameterError, match="'add/remove'"):
        query_weights(0.2, 0.5, L, K, C, P, "add/remove", 0.01)


def test_calibration_ignores_n_and_halves_the_moment_noise_on_frequencies():
    golden = 5.4953  # sigma / Delta at (1, 1e-9), privacy-engineering.md
    cal = calibrate(1.0, 1e-9, None, 256, 16, AR, count_weight=3.0)
    assert cal.noise_multiplier == pytest.approx(golden, abs=1e-4)
    assert cal.sensitivity == pytest.approx(math.sqrt(256 * harmonic(16) + 9.0) * (1 + cal.slack), rel=1e-12)
    assert 1e-9 <= cal.slack < 1e-4
    with pytest.raises(PrivacyParameterError, match="n=1000"):
        calibrate(1.0, 1e-9, 1000, 256, 16, AR, count_weight=3.0)
    with pytest.raises(PrivacyParameterError, match="count weight must be > 0"):
        calibrate(1.0, 1e-9, None, 256, 16, AR)
    # Same shares: the moments keep 1 - marginal - pair share (- the count's 0.01). A moment's noise on the frequency
    # scale is sigma / n under add-remove against sigma under replace-one: half, up to the count's share.
    n = 20_000
    _, replace = measuring.make_plan(TOY_SCHEMA, n, 1.0, 1e-6, 256, 16)
    plan, add_remove = measuring.make_plan(TOY_SCHEMA, n, 1.0, 1e-6, 256, 16, relation=AR)
    assert plan.n is None and plan.public_params()["n"] is None
    moments = 1 - plan.one_way_share - plan.pair_share  # the 1-way share with the fine tables' weights
    expected = 0.5 * math.sqrt(moments / (moments - DEFAULT_COUNT_SHARE))
    assert add_remove.sigma / n / replace.sigma == pytest.approx(expected, rel=1e-4)
    # The table cells gain less: 1/sqrt(2) of replace-one's noise (their weights absorb the count's share).
    assert add_remove.pair_noise_std() / n / replace.pair_noise_std() == pytest.approx(1 / math.sqrt(2), rel=1e-4)


def test_the_plan_does_not_depend_on_the_private_row_count():
    small, cal_small = toy_plan(n=100)
    large, cal_large = toy_plan(n=100_000)
    assert small == large and cal_small == cal_large
    assert ledger.params_hash(small.public_params()) == ledger.params_hash(large.public_params())


# -- the noisy row count -------------------------------------------------------------------------------------------


def test_pooled_row_count_is_unbiased_with_the_predicted_spread():
    # SEEDED numpy noise (test only; the product's noise is OS entropy), 4,000 trials.
    rng = np.random.default_rng(3)
    n, count_std, m_std, p_std = 5_000, 40.0, 12.0, 20.0
    m_sizes, p_sizes = (3, 16, 5), (48, 15, 80)
    truth_m = np.concatenate([np.full(s, n / s) for s in m_sizes])
    truth_p = np.concatenate([np.full(s, n / s) for s in p_sizes])
    estimates = np.array([
        pooled_row_count(
            n + count_std * rng.standard_normal(), count_std,
            truth_m + m_std * rng.standard_normal(truth_m.size), m_sizes, m_std,
            truth_p + p_std * rng.standard_normal(truth_p.size), p_sizes, p_std,
        )
        for _ in range(4_000)
    ])
    precision = count_std**-2 + sum(1 / (s * m_std**2) for s in m_sizes) + sum(1 / (s * p_std**2) for s in p_sizes)
    predicted = precision**-0.5
    assert predicted < count_std / 2  # the histograms' totals carry most of the information
    assert abs(estimates.mean() - n) < 4 * predicted / math.sqrt(len(estimates))
    assert estimates.std() / predicted == pytest.approx(1.0, abs=0.05)  # 5%: about 4.5 standard errors
    assert pooled_row_count(-50.0, 1.0, np.zeros(0), (), 1.0, np.zeros(0), (), 1.0) == 1.0


# -- the measurement, the ledger and the public text ---------------------------------------------------------------


@pytest.fixture
def rows() -> np.ndarray:
    return toy_rows(np.random.default_rng(11), 4_000)


def test_measurement_is_on_the_frequency_scale_with_the_noisy_n(rows, tmp_path):
    plan, cal = measuring.make_plan(TOY_SCHEMA, None, 2.0, 1e-6, 64, K, relation=AR)
    ledger = BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_budget("toy", 10.0, 1e-6, AR)
    measurement = measuring.measure(rows, TOY_SCHEMA, plan, cal, ledger, "r1")
    assert measurement.relation == AR and measurement.noise_multiplier == pytest.approx(cal.noise_multiplier)
    count_std = pooled_std(cal, plan)
    assert abs(measurement.n - len(rows)) <= 5 * count_std + 1
    assert measurement.sigma == pytest.approx(cal.sigma / len(rows), rel=6 * count_std / len(rows))
    # The noisy frequencies scatter around the exact ones with the measurement's stated noise (production noise).
    exact_plan, _ = measuring.make_plan(TOY_SCHEMA, len(rows), 2.0, 1e-6, 64, K, relation=RELATION_REPLACE_ONE)
    exact = measuring.exact_statistics(rows, exact_plan, LAYOUT)
    z = np.concatenate([
        ((measurement.noisy_moments - exact.moments) / measurement.moment_noise_std()[:, None]).ravel(),
        (measurement.noisy_marginals - exact.marginals) / measurement.marginal_noise_std(),
        (measurement.noisy_pairs - exact.pairs) / measurement.pair_noise_std(),
    ])
    # 487 standard normals (sd of their sd 0.032), up to the small common error of the noisy n.
    assert abs(z.mean()) < 5 / math.sqrt(z.size) + 0.02
    assert 0.85 < z.std() < 1.15
    entry = ledger.entries("toy")[0]
    assert entry.relation == AR and entry.status == "committed"
    # A stored measurement keeps its relation and cost.
    measurement.save(tmp_path / "m")
    loaded = Measurement.load(tmp_path / "m")
    assert (
        loaded.relation == AR and loaded.n == measurement.n and loaded.noise_multiplier == measurement.noise_multiplier
    )
    # The ledger never mixes relations: a replace-one spend on this dataset is refused before any noise.
    replace_plan, replace_cal = measuring.make_plan(TOY_SCHEMA, len(rows), 1.0, 1e-6, 64, K)
    spent = ledger.spent("toy")
    with pytest.raises(RelationMismatch, match="add-remove"):
        measuring.measure(rows, TOY_SCHEMA, replace_plan, replace_cal, ledger, "r2")
    assert ledger.spent("toy") == spent and len(ledger.entries("toy")) == 1


def pooled_std(cal, plan) -> float:
    precision = cal.count_noise_std() ** -2
    precision += sum(1 / (s * cal.marginal_noise_std() ** 2) for s in plan.marginal_sizes)
    precision += sum(1 / (s * cal.pair_noise_std() ** 2) for s in plan.pair_sizes)
    return precision**-0.5


def test_public_text_states_the_relation_without_the_exact_n(rows):
    plan, cal = toy_plan(epsilon=0.5)
    measurement = measuring.measure(rows, TOY_SCHEMA, plan, cal)
    text = privacy_statement(measurement)
    assert "adding or removing any one row" in text and f"noisy estimate, {measurement.n}" in text
    replace_plan, replace_cal = measuring.make_plan(TOY_SCHEMA, len(rows), 0.5, 1e-6, L, K)
    assert "replacing any one of the 4000 rows" in privacy_statement(
        measuring.measure(rows, TOY_SCHEMA, replace_plan, replace_cal)
    )


def test_synthesizer_samples_the_noisy_n_by_default(tmp_path):
    rng = np.random.default_rng(5)
    table = pd.DataFrame(
        {"a": rng.uniform(0, 1, 3_000), "b": rng.choice(list("xyz"), 3_000), "c": rng.integers(1, 6, 3_000)}
    )
    from splice_assets import MeasurementSettings, ModelSettings, Synthesizer

    ledger = BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_budget(TOY_SCHEMA.name, 10.0, 1e-6, AR)
    synth = Synthesizer(TOY_SCHEMA, 2.0, 1e-6, relation=AR, measurement=MeasurementSettings(n_directions=L, k=K),
                        model=ModelSettings(components=3, max_steps=30)).fit(table, ledger=ledger)
    assert len(synth.sample()) == synth.measurement.n == synth.privacy.n
    assert abs(synth.privacy.n - 3_000) < 100
    assert [e.status for e in ledger.entries(TOY_SCHEMA.name)] == ["committed"]


# -- empirical audit -----------------------------------------------------------------------------------------------


def run_add_remove_audit(runs_per_world: int, understate: float = 1.0) -> float:
    """epsilon lower bound from the production mechanism on D (4 public rows, d = 1, L = 2, k = 1) and D' = D plus
    the row +1, which moves [S_1 (two directions), wn n] by exactly Delta."""
    directions = draw_directions(0, 2, 1)
    x = np.array([[-1.0], [0.2], [0.5], [-0.3]])
    x2 = np.vstack([x, [[1.0]]])
    weight = 0.5
    cal = calibrate(AUDIT_EPS, AUDIT_DELTA, None, 2, 1, AR, count_weight=weight)
    f, f2 = (np.concatenate([moment_sums(v, directions, 1).moments(1).ravel(), [weight * len(v)]]) for v in (x, x2))
    gap = f2 - f
    assert np.linalg.norm(gap) == pytest.approx(cal.sensitivity, rel=1e-4)
    u = gap / np.linalg.norm(gap)
    sigma = cal.sigma / understate

    def scores(vector: np.ndarray) -> np.ndarray:
        moments, counts = np.tile(vector[:2], (1, runs_per_world)), np.full(runs_per_world, vector[2] / weight)
        noisy_moments, noisy_counts = add_noise_joint(moments, counts, weight, sigma)
        runs = np.column_stack([noisy_moments.reshape(runs_per_world, 2), weight * noisy_counts])
        return (runs - f) @ u

    return audit_epsilon(scores(f), scores(f2), runs_per_world)


def test_add_remove_audit_ci_sized():
    eps_lb = run_add_remove_audit(5_000)
    print(f"add-remove audit (5,000 runs/world): eps_lb = {eps_lb:.3f} <= eps = {AUDIT_EPS}")
    assert eps_lb <= AUDIT_EPS


def test_add_remove_audit_catches_a_gross_error():
    assert run_add_remove_audit(5_000, understate=10.0) > AUDIT_EPS


def test_statistics_of_the_other_relation_are_refused_before_any_charge(rows, tmp_path):
    ledger = BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_budget("toy", 10.0, 1e-6, AR)
    replace_plan, _ = measuring.make_plan(TOY_SCHEMA, len(rows), 1.0, 1e-6, L, K)
    plan, cal = toy_plan()
    frequencies = measuring.exact_statistics(rows, replace_plan, LAYOUT)
    with pytest.raises(ValueError, match="do not match the plan's relation 'add-remove'"):
        measuring.measure_exact(frequencies, plan, cal, ledger, "r1")
    assert ledger.entries("toy") == []


@pytest.mark.slow
def test_add_remove_audit_long():
    eps_lb = run_add_remove_audit(100_000)
    print(f"add-remove audit (100,000 runs/world): eps_lb = {eps_lb:.3f} <= eps = {AUDIT_EPS}")
    assert 0.3 < eps_lb <= AUDIT_EPS


@pytest.mark.slow
def test_add_remove_audit_catches_a_2x_error():
    eps_lb = run_add_remove_audit(250_000, understate=2.0)
    print(f"add-remove audit, Delta under-stated 2x (250,000 runs/world): eps_lb = {eps_lb:.3f} > eps = {AUDIT_EPS}")
    assert eps_lb > AUDIT_EPS
