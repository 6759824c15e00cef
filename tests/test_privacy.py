"""Calibration, parameter checks, the production noise sampler and composition (privacy-engineering.md §1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian, get_sigma_gaussian

from splice_assets.layout import harmonic
from splice_assets.private.gaussian_dp import epsilon_for, log_delta, log_ndtr, sigma_for
from splice_assets.private.mechanism import (
    Calibration,
    PrivacyParameterError,
    add_noise,
    calibrate,
    classical_noise_multiplier,
    compose_epsilon,
    delta_for,
    float_slack,
    gaussian_noise,
    raw_moment_noise_std,
    sensitivity,
    validate_parameters,
)

GOLDEN = [((1.0, 1e-6), 4.2247), ((0.5, 1e-6), 8.0576), ((3.0, 1e-6), 1.5439), ((1.0, 1e-9), 5.4953)]


@pytest.mark.parametrize(("params", "ratio"), GOLDEN)
def test_golden_sigma_over_delta(params, ratio):
    eps, delta = params
    cal = calibrate(eps, delta, n=10_000, n_directions=1024, k=16)
    assert isinstance(cal, Calibration)
    assert round(cal.sigma / cal.sensitivity, 4) == ratio
    assert cal.noise_multiplier == pytest.approx(cal.sigma / cal.sensitivity, rel=1e-15)
    # sigma carries the 1e-9 margin over the root-finder, never less.
    assert cal.noise_multiplier >= get_sigma_gaussian(eps, delta) * (1 + 1e-9) * (1 - 1e-15)


@pytest.mark.parametrize(("params", "ratio"), GOLDEN)
def test_delta_of_sigma_used_meets_target(params, ratio):
    eps, delta = params
    cal = calibrate(eps, delta, n=500, n_directions=64, k=8)
    assert delta_for(cal.noise_multiplier, eps) <= delta
    # ... and it is tight: the un-margined root is within a hair of the target.
    assert delta_for(get_sigma_gaussian(eps, delta), eps) == pytest.approx(delta, rel=1e-6)
    # delta_for is the inverse of dp_accounting's epsilon computation.
    assert get_epsilon_gaussian(cal.noise_multiplier, delta) <= eps


def test_log_ndtr_matches_scipy_from_the_far_tail_to_the_body():
    from scipy.special import log_ndtr as scipy_log_ndtr

    xs = np.concatenate([np.linspace(-80.0, 12.0, 9201), -np.logspace(-9, 2, 301)])
    ours = np.array([log_ndtr(float(x)) for x in xs])
    assert np.allclose(ours, scipy_log_ndtr(xs), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("eps", [0.01, 0.1, 1.0, 3.0, 10.0, 50.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9, 1e-12, 1e-15])
def test_the_analytic_gaussian_inverses_match_dp_accounting_on_the_private_side(eps, delta):
    sigma = sigma_for(eps, delta)
    # dp_accounting's brentq stops within 1e-12 of the root; ours bisects to the last float.
    assert sigma == pytest.approx(get_sigma_gaussian(eps, delta), rel=2e-12)
    assert log_delta(sigma, eps) <= math.log(delta) < log_delta(math.nextafter(sigma, 0.0), eps)
    eps_back = epsilon_for(sigma, delta)
    assert eps_back == pytest.approx(get_epsilon_gaussian(sigma, delta, tol=1e-14), rel=1e-11, abs=1e-13)
    assert log_delta(sigma, eps_back) <= math.log(delta) < log_delta(sigma, math.nextafter(eps_back, 0.0))


def test_delta_for_is_monotone_and_edge_cases():
    assert delta_for(math.inf, 1.0) == 0.0
    values = [delta_for(s, 1.0) for s in (1.0, 2.0, 4.0, 8.0)]
    assert values == sorted(values, reverse=True)
    with pytest.raises(PrivacyParameterError):
        delta_for(0.0, 1.0)


@pytest.mark.parametrize("eps", [0.1, 0.3, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("delta", [1e-5, 1e-6, 1e-9])
def test_classical_bound_dominates_analytic_below_one(eps, delta):
    assert classical_noise_multiplier(eps, delta) >= calibrate(eps, delta, 100, 4, 2).noise_multiplier


def test_sensitivity_formula_and_slack():
    n, L, k = 1000, 1024, 16
    assert sensitivity(n, L, k) == pytest.approx(2 / n * math.sqrt(L * harmonic(k)), rel=1e-15)
    assert harmonic(k) <= 1 + math.log(k)
    assert float_slack(1000, 16) == 1e-9
    big = float_slack(10**9, 16)
    assert big == pytest.approx(4 * 2.0**-53 * 1e9 * math.sqrt(16 / harmonic(16)))
    cal = calibrate(1.0, 1e-6, n, L, k)
    assert cal.sensitivity == pytest.approx(sensitivity(n, L, k) * (1 + cal.slack), rel=1e-15)
    assert cal.sensitivity > sensitivity(n, L, k)


def test_raw_moment_noise_std():
    std = raw_moment_noise_std(0.5, 4)
    np.testing.assert_allclose(std, 0.5 * np.sqrt([1, 2, 3, 4]))
    cal = calibrate(1.0, 1e-6, 1000, 8, 4)
    np.testing.assert_allclose(cal.noise_std_per_order(), cal.sigma * np.sqrt(np.arange(1, 5)))


@pytest.mark.parametrize(
    ("kwargs", "quoted"),
    [
        (dict(epsilon=0.0), "0.0"),
        (dict(epsilon=-1.0), "-1.0"),
        (dict(epsilon=float("nan")), "nan"),
        (dict(epsilon=float("inf")), "inf"),
        (dict(delta=0.0), "0.0"),
        (dict(delta=1e-3), "0.001"),  # >= 1/n_min = 1e-4
        (dict(delta=1e-4), "0.0001"),  # the open upper end
        (dict(delta=float("nan")), "nan"),
        (dict(k=0), "0"),
        (dict(k=2.5), "2.5"),
        (dict(k=True), "True"),
        (dict(n_directions=0), "0"),
        (dict(n_directions=-3), "-3"),
        (dict(n_directions=8.0), "8.0"),
        (dict(n=9_999), "9999"),
    ],
)
def test_parameter_errors_quote_the_value(kwargs, quoted):
    params = dict(epsilon=1.0, delta=1e-9, k=16, n_directions=1024, n_min=10_000)
    params.update(kwargs)
    with pytest.raises(PrivacyParameterError) as info:
        validate_parameters(**params)
    assert quoted in str(info.value)
    assert isinstance(info.value, ValueError)


def test_valid_parameters_pass():
    validate_parameters(1.0, 1e-9, 16, 1024, 10_000)
    validate_parameters(10.0, 9.99e-5, 1, 1, 10_000, n=10_000)
    validate_parameters(0.5, 1e-9, np.int64(4), np.int32(8), 100)


def test_calibrate_rejects_bad_values():
    for bad in (dict(epsilon=0.0), dict(delta=1.0), dict(n=0), dict(k=0), dict(n_directions=0)):
        params = dict(epsilon=1.0, delta=1e-6, n=100, n_directions=4, k=2)
        params.update(bad)
        with pytest.raises(PrivacyParameterError):
            calibrate(**params)
    with pytest.raises(PrivacyParameterError):
        calibrate(1.0, 1e-6, 100, 4, 2, relation="add-remove")


# -- the production sampler ------------------------------------------------------------------------------------


def test_sampler_std_within_one_percent():
    # 2e5 draws: the sample std has relative s.e. 1/sqrt(2 * 2e5) = 0.16%, so 1% is > 6 s.e.
    sigma = 0.37
    draws = gaussian_noise(np.zeros(200_000), sigma)
    assert abs(draws.std() / sigma - 1) < 0.01
    assert abs(draws.mean()) < 5 * sigma / math.sqrt(draws.size)
    # Symmetric and Gaussian tails: P(|Z| > 2 sigma) = 4.55%, s.e. 0.05%.
    assert abs(np.mean(np.abs(draws) > 2 * sigma) - 0.0455) < 0.003


def test_add_noise_scales_per_order_and_coordinates_are_uncorrelated():
    k, L, sigma = 4, 50_000, 0.2
    noisy = add_noise(np.zeros((k, L)), sigma)
    assert noisy.shape == (k, L)
    std = noisy.std(axis=1)
    np.testing.assert_allclose(std, sigma * np.sqrt(np.arange(1, k + 1)), rtol=0.02)  # s.e. 0.32% each
    scaled = noisy / np.sqrt(np.arange(1, k + 1))[:, None]
    corr = np.corrcoef(scaled)  # between orders
    off = corr[~np.eye(k, dtype=bool)]
    assert np.max(np.abs(off)) < 5 / math.sqrt(L)
    flat = scaled.ravel()
    lag1 = np.corrcoef(flat[:-1], flat[1:])[0, 1]  # between neighbouring coordinates
    assert abs(lag1) < 5 / math.sqrt(flat.size)


def test_add_noise_is_centred_on_the_input_and_fresh_each_run():
    rng = np.random.default_rng(3)
    moments = rng.uniform(-1, 1, size=(3, 20_000))
    a = add_noise(moments, 0.05)
    b = add_noise(moments, 0.05)
    assert not np.array_equal(a, b)
    assert np.mean(a != b) > 0.999
    resid = (a - moments) / np.sqrt([1, 2, 3])[:, None]
    assert abs(resid.std() / 0.05 - 1) < 0.02
    assert abs(resid.mean()) < 5 * 0.05 / math.sqrt(resid.size)


def test_add_noise_rejects_bad_input():
    with pytest.raises(ValueError):
        add_noise(np.array([[np.nan, 0.0]]), 1.0)
    with pytest.raises(ValueError):
        add_noise(np.zeros(3), 1.0)
    with pytest.raises(PrivacyParameterError):
        add_noise(np.zeros((2, 2)), 0.0)
    with pytest.raises(PrivacyParameterError):
        add_noise(np.zeros((2, 2)), float("nan"))


# -- composition -------------------------------------------------------------------------------------------------


def test_twelve_refreshes_compose_to_3_90():
    nm = calibrate(1.0, 1e-6, 1000, 64, 8).noise_multiplier
    eps = compose_epsilon([nm] * 12, 1e-6)
    assert eps == pytest.approx(3.90, abs=0.01)
    # A Gaussian composed with itself is exactly Gaussian with sigma/sqrt(12): the PLD value is an upper bound.
    exact = get_epsilon_gaussian(nm / math.sqrt(12), 1e-6)
    assert exact <= eps <= exact + 1e-4
    assert eps < 12  # naive addition


def test_single_release_composes_to_its_own_epsilon():
    for eps, delta in [(1.0, 1e-6), (0.5, 1e-9), (3.0, 1e-6)]:
        nm = calibrate(eps, delta, 1000, 64, 8).noise_multiplier
        assert compose_epsilon([nm], delta) == pytest.approx(eps, abs=2e-6)
        assert compose_epsilon([nm], delta) <= eps + 1e-9  # fits a budget of exactly eps


def test_compose_is_computed_once_per_distinct_set_of_events():
    """The accountant is cached by its (sorted) events: the order of the entries does not matter, a repeat costs no
    composition, and the cached value is the one a fresh composition gives."""
    from splice_assets.private import mechanism

    nm = calibrate(1.0, 1e-6, 1000, 64, 8).noise_multiplier
    mechanism._composed.cache_clear()
    first = compose_epsilon([nm, 2 * nm, nm], 1e-6, [0.25])
    before = mechanism._composed.cache_info()
    assert compose_epsilon([2 * nm, nm, None, nm], 1e-6, [0.25]) == first
    after = mechanism._composed.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    mechanism._composed.cache_clear()
    assert compose_epsilon([nm, nm, 2 * nm], 1e-6, [0.25]) == first


def test_compose_rounds_up_skips_zero_cost_and_rejects_bad_values():
    nm = calibrate(1.0, 1e-6, 1000, 64, 8).noise_multiplier
    eps = compose_epsilon([nm, nm, nm], 1e-6)
    assert round(eps, 6) == eps
    assert eps >= get_epsilon_gaussian(nm / math.sqrt(3), 1e-6)
    assert compose_epsilon([nm, None, math.inf, nm, nm], 1e-6) == eps
    assert compose_epsilon([], 1e-6) == 0.0
    assert compose_epsilon([math.inf], 1e-6) == 0.0
    mixed = compose_epsilon([nm, 2 * nm], 1e-6)
    assert compose_epsilon([nm], 1e-6) < mixed < compose_epsilon([nm, nm], 1e-6)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(PrivacyParameterError):
            compose_epsilon([bad], 1e-6)
    with pytest.raises(PrivacyParameterError):
        compose_epsilon([nm], 0.0)


def test_pld_and_exact_gaussian_composition_agree():
    from dp_accounting import dp_event, pld

    nms = [calibrate(e, 1e-6, 1000, 64, 8).noise_multiplier for e in (0.5, 1.0, 1.0, 3.0)]
    accountant = pld.PLDAccountant()
    for nm in nms:
        accountant.compose(dp_event.GaussianDpEvent(nm))
    pld_eps = accountant.get_epsilon(1e-6)
    eps = compose_epsilon(nms, 1e-6)
    assert eps == pytest.approx(pld_eps, abs=1e-4)
    effective = sum(nm**-2 for nm in nms) ** -0.5
    assert eps >= get_epsilon_gaussian(effective, 1e-6)
    # dp_accounting's REPLACE_ONE relation would double the sensitivity again: epsilon 2.12 instead of 1.
    from dp_accounting.privacy_accountant import NeighboringRelation

    replace = pld.PLDAccountant(NeighboringRelation.REPLACE_ONE)
    replace.compose(dp_event.GaussianDpEvent(nms[1]))
    assert replace.get_epsilon(1e-6) == pytest.approx(2.12, abs=0.01)
    assert compose_epsilon([nms[1]], 1e-6) == pytest.approx(1.0, abs=1e-6)
