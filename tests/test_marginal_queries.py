"""The 1-way and 2-way histogram query families: exact counts, joint sensitivity, joint noise, the model's closed
form, and the fit's use of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from splice_assets.layout import (
    coordinate_cells,
    coordinate_pairs,
    draw_directions,
    layout_for,
    marginal_cells,
    marginal_sizes,
    pair_sizes,
)
from splice_assets.model.mixture import (
    MarginalEvaluator,
    MixtureParameters,
    PairEvaluator,
    TorchMixture,
)
from splice_assets.private import measuring
from splice_assets.private.mechanism import (
    PrivacyParameterError,
    add_noise_joint,
    calibrate,
    float_slack,
    marginal_weight,
    query_weights,
    sensitivity,
)
from splice_assets.private.statistics import marginal_counts, moment_sums, pair_counts
from splice_assets.sampling import from_parameters, sample_cube
from splice_assets.schema import parse_schema

SCHEMA = parse_schema(
    {
        "name": "toy",
        "version": 1,
        "n_min": 2,
        "columns": [
            {"name": "a", "kind": "continuous", "bounds": [0, 1], "nullable": True},
            {"name": "b", "kind": "categorical", "categories": ["x", "y", "z"]},
            {"name": "c", "kind": "ordinal", "categories": [1, 2, 3, 4, 5], "nullable": True},
        ],
    }
)
LAYOUT = layout_for(SCHEMA)  # a(value), a(missing), b, c(+missing level): d = 4
BINS = 4


def random_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    x = np.empty((n, LAYOUT.d))
    x[:, 0] = rng.uniform(-1, 1, n)
    for i, coord in enumerate(LAYOUT.coordinates[1:], start=1):
        x[:, i] = coord.grid()[rng.integers(coord.levels, size=n)]
    return x


def released_vector(x: np.ndarray, directions: np.ndarray, k: int, w: float) -> np.ndarray:
    """f(D) exactly as released: [m_j / sqrt(j), w * frequencies]."""
    n = len(x)
    m = moment_sums(x, directions, k).moments(n) / np.sqrt(np.arange(1, k + 1))[:, None]
    return np.concatenate([m.ravel(), w * marginal_counts(x, LAYOUT, BINS).frequencies(n)])


def test_counts_are_exact_and_partial_counts_add():
    x = random_rows(np.random.default_rng(0), 1000)
    whole = marginal_counts(x, LAYOUT, BINS)
    parts = marginal_counts(x[:317], LAYOUT, BINS) + marginal_counts(x[317:], LAYOUT, BINS, chunk_rows=50)
    np.testing.assert_array_equal(whole.counts, parts.counts)
    sizes = marginal_sizes(LAYOUT, BINS)
    assert sizes == (4, 2, 3, 6)
    for block in np.split(whole.counts, np.cumsum(sizes)[:-1]):
        assert block.sum() == 1000  # one cell per coordinate per row
    cells = marginal_cells(
        np.array([[-1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, 1.0], [-0.5, 1.0, 0.0, 0.2]]), LAYOUT, BINS
    )
    np.testing.assert_array_equal(cells, [[0, 0, 0, 0], [3, 1, 2, 5], [1, 1, 1, 3]])


@pytest.mark.parametrize("share", [0.05, 0.3, 0.9])
def test_joint_sensitivity_random_and_adversarial(share):
    rng = np.random.default_rng(int(share * 100))
    L, k = 16, 6
    directions = draw_directions(3, L, LAYOUT.d)
    w = marginal_weight(share, L, k, LAYOUT.d)
    sizes = marginal_sizes(LAYOUT, BINS)
    worst = 0.0
    for _trial in range(60):
        n = int(rng.integers(2, 40))
        x = random_rows(rng, n)
        base = released_vector(x, directions, k, w)
        delta = sensitivity(n, L, k, LAYOUT.d, w) * (1 + float_slack(n, k, L, sum(sizes), w, LAYOUT.d))
        row = int(rng.integers(n))
        best = 0.0
        # Adversarial: try corners and random rows for the replacement, keep the worst.
        candidates = [random_rows(rng, 1)[0] for _ in range(20)] + [np.sign(rng.uniform(-1, 1, LAYOUT.d))]
        for new in candidates:
            x2 = x.copy()
            x2[row] = new
            best = max(best, float(np.linalg.norm(released_vector(x2, directions, k, w) - base)))
        assert best <= delta
        worst = max(worst, best / delta)
    assert worst > 0.5  # the bound is not vacuous: some neighbours come close to it


def test_joint_noise_has_the_right_scales():
    moments = np.zeros((4, 5000))
    marginals = np.full(20000, 0.25)
    noisy_m, noisy_h = add_noise_joint(moments, marginals, weight=8.0, sigma=0.4)
    for j in range(4):
        assert abs(noisy_m[j].std() / (0.4 * np.sqrt(j + 1)) - 1) < 0.05
    assert abs((noisy_h - 0.25).std() / (0.4 / 8.0) - 1) < 0.03
    again, _ = add_noise_joint(moments, marginals, weight=8.0, sigma=0.4)
    assert not np.allclose(again, noisy_m)  # OS entropy: two runs differ


def test_plan_with_marginals_costs_the_same_privacy_but_more_sensitivity():
    off, cal_off = measuring.make_plan(SCHEMA, 100, 1.0, 1e-6, 64, 8, marginal_share=0.0, pair_share=0.0)
    on, cal_on = measuring.make_plan(SCHEMA, 100, 1.0, 1e-6, 64, 8, marginal_share=0.2, pair_share=0.0,
                                     interval_weight=1)
    assert off.marginal_sizes == () and on.marginal_sizes == marginal_sizes(LAYOUT)
    assert cal_on.noise_multiplier == pytest.approx(cal_off.noise_multiplier)
    # share of Delta^2: (Delta_on / Delta_off)^2 = 1 / (1 - share)
    assert (cal_on.sensitivity / cal_off.sensitivity) ** 2 == pytest.approx(1 / 0.8, rel=1e-6)
    ref = calibrate(1.0, 1e-6, 100, 64, 8)
    assert ref.sensitivity == pytest.approx(cal_off.sensitivity)


def test_model_marginals_match_monte_carlo():
    rng = np.random.default_rng(5)
    K = 3
    disc = [LAYOUT.coordinates[i] for i in LAYOUT.discrete_index]
    params = MixtureParameters(
        weights=np.array([0.5, 0.3, 0.2]),
        probs=tuple(rng.dirichlet(np.ones(c.levels), size=K) for c in disc),
        means=np.array([[-0.9], [0.1], [0.95]]),
        factors=np.zeros((K, 1, 1)),
        diag=np.array([[0.04], [0.3], [0.01]]),
    )
    with torch.no_grad():
        exact = MarginalEvaluator(LAYOUT, BINS)(TorchMixture.from_numpy(params, LAYOUT)).numpy()
    n = 1_000_000
    cube = sample_cube(from_parameters(params, LAYOUT), n, seed=1)
    mc = marginal_counts(cube, LAYOUT, BINS).frequencies(n)
    se = np.sqrt(np.clip(exact * (1 - exact), 1e-12, None) / n)
    assert np.all(np.abs(mc - exact) <= 4 * se + 1e-12)
    for block in np.split(exact, np.cumsum(marginal_sizes(LAYOUT, BINS))[:-1]):
        assert block.sum() == pytest.approx(1.0, abs=1e-12)


def test_marginal_gradients_are_finite_at_the_edges():
    params = MixtureParameters(
        weights=np.array([1.0]),
        probs=tuple(
            np.full((1, c.levels), 1 / c.levels) for c in (LAYOUT.coordinates[i] for i in LAYOUT.discrete_index)
        ),
        means=np.array([[0.999]]),
        factors=np.zeros((1, 1, 0)),
        diag=np.array([[1e-6]]),
    )
    q = TorchMixture.from_numpy(params, LAYOUT)
    means = q.means.clone().requires_grad_(True)
    diag = q.diag.clone().requires_grad_(True)
    q2 = TorchMixture(q.weights, q.probs, means, q.factors, diag)
    out = MarginalEvaluator(LAYOUT, BINS)(q2)
    (out**2).sum().backward()
    assert torch.isfinite(means.grad).all() and torch.isfinite(diag.grad).all()


def test_matching_to_marginals_hits_the_targets_and_keeps_ranks():
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.sampling import match_to_marginals, target_counts

    rng = np.random.default_rng(9)
    cube = random_rows(rng, 2000)
    sizes = marginal_sizes(LAYOUT, BINS)
    targets_freq = np.concatenate([rng.dirichlet(np.ones(s)) for s in sizes])
    targets_freq[0] -= 0.01  # noisy targets may be slightly off the simplex; counts still sum to n
    matched = match_to_marginals(cube, LAYOUT, MarginalTargets(targets_freq, 5.0, BINS), np.random.default_rng(1))
    counts = marginal_counts(matched, LAYOUT, BINS).counts
    for block, target in zip(np.split(counts, np.cumsum(sizes)[:-1]), np.split(targets_freq, np.cumsum(sizes)[:-1])):
        np.testing.assert_array_equal(block, target_counts(target, 2000))
    # ranks of the continuous coordinate are preserved (non-decreasing map)
    order = np.argsort(cube[:, 0], kind="stable")
    assert np.all(np.diff(matched[order, 0]) >= 0)
    assert target_counts(np.array([0.5, -0.2, 0.7]), 10).tolist() == [4, 0, 6]


def test_matching_splits_tied_rows_at_random():
    """Rows tied on one value (a spike at a bound of the continuous coordinate, one level of a discrete one) are cut
    between two target cells at random, not by row position: over 200 matchings of 400 tied rows cut in half,
    the mean position of the rows sent to the lower cell has mean 199.5 and sd about 5.8 per matching, so 0.41
    over the 200; a cut by position would put it at 99.5."""
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.sampling import match_to_marginals

    n, sizes = 400, marginal_sizes(LAYOUT, BINS)
    cube = random_rows(np.random.default_rng(3), n)
    cube[:, 0] = 1.0  # every row at the upper bound
    cube[:, 2] = LAYOUT.coordinates[2].grid()[0]  # every row on the first level
    freq = [np.zeros(s) for s in sizes]
    for i in range(LAYOUT.d):
        freq[i][:2] = 0.5
    targets = MarginalTargets(np.concatenate(freq), 1.0, BINS)
    means = {0: [], 2: []}
    for seed in range(200):
        matched = match_to_marginals(cube, LAYOUT, targets, np.random.default_rng(seed))
        for i in means:
            lower = coordinate_cells(matched[:, i], LAYOUT.coordinates[i], BINS) == 0
            assert lower.sum() == n // 2
            means[i].append(np.flatnonzero(lower).mean())
    for i, values in means.items():
        assert abs(np.mean(values) - (n - 1) / 2) < 4 * 0.41, i


def test_simplex_projection_satisfies_its_optimality_conditions():
    from splice_assets.model.product_em import simplex_projection

    rng = np.random.default_rng(4)
    for size in (1, 2, 7, 42):
        y = rng.dirichlet(np.ones(size)) + rng.normal(0, 0.05, size)
        p = simplex_projection(y)
        assert np.all(p >= 0) and p.sum() == pytest.approx(1.0, abs=1e-12)
        # KKT: y - p is one constant tau on the support and y <= tau off it.
        tau = (y - p)[p > 0]
        np.testing.assert_allclose(tau, tau[0], atol=1e-12)
        assert np.all(y[p == 0] <= tau[0] + 1e-12)


@pytest.mark.parametrize("bounds", [(1, 16), (0, 99), (17, 90), (0, 1_500_000), (0, 9)])
def test_matched_integer_columns_decode_into_their_target_cells(bounds):
    """Rounding integers at decode time must not push matched rows into the neighbouring 16-bin cell."""
    from splice_assets.evaluation.metrics import column_codes
    from splice_assets.layout import decode
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.sampling import (
        integer_coordinates,
        match_to_marginals,
        target_counts,
    )

    schema = parse_schema(
        {
            "name": "ints",
            "version": 1,
            "n_min": 2,
            "columns": [{"name": "v", "kind": "integer", "bounds": list(bounds)}],
        }
    )
    layout, bins, n = layout_for(schema), 16, 5000
    lo, hi = bounds
    # Targets only on cells that hold an integer (with bounds (0, 9) some 16-bin cells hold none).
    holds_integer = (
        np.bincount(
            np.minimum(np.floor((np.arange(lo, hi + 1) - lo) / (hi - lo) * bins), bins - 1).astype(int), minlength=bins
        )[:bins]
        > 0
    )
    rng = np.random.default_rng(2)
    freq = rng.dirichlet(np.ones(bins)) * holds_integer
    freq /= freq.sum()
    cube = rng.uniform(-1, 1, (n, 1))
    matched = match_to_marginals(cube, layout, MarginalTargets(freq, 1.0, bins), rng, integer_coordinates(schema))
    table = decode(matched, schema)
    codes, _ = column_codes(table["v"], schema.columns[0])
    np.testing.assert_array_equal(np.bincount(codes, minlength=bins + 1)[:bins], target_counts(freq, n))
    order = np.argsort(cube[:, 0], kind="stable")
    assert np.all(np.diff(table["v"].to_numpy()[order]) >= 0)  # ranks kept


# ---------------------------------------------------------------------------------------------------------------
# 2-way histograms of coordinate pairs


PAIRS = coordinate_pairs(LAYOUT)


def released_with_pairs(x: np.ndarray, directions: np.ndarray, k: int, w: float, w2: float) -> np.ndarray:
    """f(D) exactly as released with both histogram families: [m_j / sqrt(j), w * h1, w2 * h2]."""
    pairs = pair_counts(x, LAYOUT, PAIRS, BINS).frequencies(len(x))
    return np.concatenate([released_vector(x, directions, k, w), w2 * pairs])


def test_pairs_skip_same_column_and_counts_are_cross_tabulations():
    # a(value) and a(missing) come from one column: their pair is never measured.
    assert (0, 1) not in PAIRS and len(PAIRS) == 5
    x = random_rows(np.random.default_rng(1), 2000)
    counts = pair_counts(x, LAYOUT, PAIRS, BINS)
    parts = pair_counts(x[:999], LAYOUT, PAIRS, BINS) + pair_counts(x[999:], LAYOUT, PAIRS, BINS, chunk_rows=64)
    np.testing.assert_array_equal(counts.counts, parts.counts)
    cells = marginal_cells(x, LAYOUT, BINS)
    sizes = marginal_sizes(LAYOUT, BINS)
    blocks = np.split(counts.counts, np.cumsum(pair_sizes(LAYOUT, PAIRS, BINS))[:-1])
    for (a, b), block in zip(PAIRS, blocks):
        table = np.zeros((sizes[a], sizes[b]), dtype=np.int64)
        np.add.at(table, (cells[:, a], cells[:, b]), 1)
        np.testing.assert_array_equal(block, table.ravel())


@pytest.mark.parametrize("shares", [(0.1, 0.5), (0.3, 0.3), (0.0, 0.8)])
def test_sensitivity_with_pairs_random_and_adversarial(shares):
    rng = np.random.default_rng(int(shares[1] * 100))
    L, k = 12, 5
    directions = draw_directions(4, L, LAYOUT.d)
    w, w2, _ = query_weights(*shares, L, k, LAYOUT.d, len(PAIRS))
    cells1, cells2 = sum(marginal_sizes(LAYOUT, BINS)), sum(pair_sizes(LAYOUT, PAIRS, BINS))
    worst = 0.0
    for _trial in range(40):
        n = int(rng.integers(2, 40))
        x = random_rows(rng, n)
        base = released_with_pairs(x, directions, k, w, w2)
        slack = float_slack(n, k, L, cells1, w, LAYOUT.d, cells2, w2, len(PAIRS))
        delta = sensitivity(n, L, k, LAYOUT.d, w, len(PAIRS), w2) * (1 + slack)
        row = int(rng.integers(n))
        candidates = [random_rows(rng, 1)[0] for _ in range(15)] + [np.sign(rng.uniform(-1, 1, LAYOUT.d))]
        for new in candidates:
            x2 = x.copy()
            x2[row] = new
            gap = float(np.linalg.norm(released_with_pairs(x2, directions, k, w, w2) - base))
            assert gap <= delta
            worst = max(worst, gap / delta)
    assert worst > 0.5  # the bound is not vacuous


def test_query_weights_split_delta_squared_as_declared_and_reject_bad_shares():
    L, k, C, P = 64, 8, 7, 21
    w, w2, _ = query_weights(0.2, 0.5, L, k, C, P)
    total = sensitivity(1, L, k, C, w, P, w2) ** 2
    assert 2 * w**2 * C / total == pytest.approx(0.2) and 2 * w2**2 * P / total == pytest.approx(0.5)
    assert query_weights(0.3, 0.0, L, k, C, P)[0] == pytest.approx(marginal_weight(0.3, L, k, C))
    with pytest.raises(PrivacyParameterError, match="0.6"):
        query_weights(0.6, 0.4, L, k, C, P)
    with pytest.raises(PrivacyParameterError, match="-0.1"):
        query_weights(0.1, -0.1, L, k, C, P)


def test_joint_noise_with_per_cell_weights():
    weights = np.concatenate([np.full(10000, 8.0), np.full(10000, 2.0)])
    _, noisy = add_noise_joint(np.zeros((2, 10)), np.full(20000, 0.5), weights, sigma=0.4)
    assert abs((noisy[:10000] - 0.5).std() / (0.4 / 8.0) - 1) < 0.04
    assert abs((noisy[10000:] - 0.5).std() / (0.4 / 2.0) - 1) < 0.04


def test_plan_with_pairs_costs_the_same_privacy_and_round_trips(tmp_path):
    plan, cal = measuring.make_plan(SCHEMA, 500, 1.0, 1e-6, 32, 6, marginal_share=0.2, pair_share=0.4,
                                    interval_weight=1)
    off, cal_off = measuring.make_plan(SCHEMA, 500, 1.0, 1e-6, 32, 6, marginal_share=0.0, pair_share=0.0)
    assert plan.pairs == PAIRS and plan.mechanism == "gaussian/sliced-chebyshev+marginals+pairs+fine"
    assert off.mechanism == "gaussian/sliced-chebyshev"
    assert cal.noise_multiplier == pytest.approx(cal_off.noise_multiplier)
    assert (cal.sensitivity / cal_off.sensitivity) ** 2 == pytest.approx(1 / 0.4, rel=1e-6)
    x = random_rows(np.random.default_rng(2), 500)
    m = measuring.measure(x, SCHEMA, plan, cal)
    exact = pair_counts(x, LAYOUT, PAIRS, plan.numeric_bins).frequencies(500)
    assert m.noisy_pairs.shape == exact.shape == (180,)
    # Noise of the right size (OS entropy, unseeded): over 180 cells the standardised residuals' std has
    # standard error ~0.053 and their mean ~0.075; the bounds are > 4 standard errors.
    z = (m.noisy_pairs - exact) / m.pair_noise_std()
    assert abs(z.std() - 1) < 0.25 and abs(z.mean()) < 0.32
    m.save(tmp_path / "m")
    back = type(m).load(tmp_path / "m")
    np.testing.assert_array_equal(back.noisy_pairs, m.noisy_pairs)
    assert back.pairs == m.pairs and back.pair_weight == m.pair_weight


def _three_component_params(rng: np.random.Generator) -> MixtureParameters:
    disc = [LAYOUT.coordinates[i] for i in LAYOUT.discrete_index]
    return MixtureParameters(
        weights=np.array([0.5, 0.3, 0.2]),
        probs=tuple(rng.dirichlet(np.ones(c.levels), size=3) for c in disc),
        means=np.array([[-0.9], [0.1], [0.95]]),
        factors=np.zeros((3, 1, 1)),
        diag=np.array([[0.04], [0.3], [0.01]]),
    )


def test_model_pairs_match_monte_carlo_and_marginalise_to_the_1_way_cells():
    params = _three_component_params(np.random.default_rng(6))
    q = TorchMixture.from_numpy(params, LAYOUT)
    with torch.no_grad():
        exact = PairEvaluator(LAYOUT, BINS, PAIRS)(q).numpy()
        one_way = np.split(MarginalEvaluator(LAYOUT, BINS)(q).numpy(), np.cumsum(marginal_sizes(LAYOUT, BINS))[:-1])
    sizes = marginal_sizes(LAYOUT, BINS)
    for (a, b), block in zip(PAIRS, np.split(exact, np.cumsum(pair_sizes(LAYOUT, PAIRS, BINS))[:-1])):
        table = block.reshape(sizes[a], sizes[b])
        np.testing.assert_allclose(table.sum(1), one_way[a], atol=1e-14)
        np.testing.assert_allclose(table.sum(0), one_way[b], atol=1e-14)
    n = 1_000_000
    cube = sample_cube(from_parameters(params, LAYOUT), n, seed=2)
    mc = pair_counts(cube, LAYOUT, PAIRS, BINS).frequencies(n)
    se = np.sqrt(np.clip(exact * (1 - exact), 1e-12, None) / n)
    assert np.all(np.abs(mc - exact) <= 4.5 * se + 1e-12)


def test_pooled_marginals_are_exact_without_noise_and_less_noisy_with_it():
    """Pooling the 1-way histograms with the 2-way margins (inverse variance) is post-processing: exact inputs
    give the exact marginals back, and noisy ones (seeded here) a smaller error. Measured on this layout over 20
    draws: mean squared error ratio pooled / direct 0.46; tolerance 0.85."""
    from splice_assets.measurement import Measurement
    from splice_assets.postprocess.targets import pooled_marginals

    plan, cal = measuring.make_plan(SCHEMA, 400, 1.0, 1e-6, 16, 4, marginal_share=0.2, pair_share=0.5)
    x = random_rows(np.random.default_rng(8), 400)
    stats = measuring.exact_statistics(x, plan, LAYOUT)

    def measurement(h1: np.ndarray, h2: np.ndarray) -> Measurement:
        return measuring.measurement_of(plan, cal, LAYOUT.d, stats.moments, h1, h2)

    np.testing.assert_allclose(pooled_marginals(measurement(stats.marginals, stats.pairs)), stats.marginals, atol=1e-12)
    rng = np.random.default_rng(9)
    direct_err, pooled_err = 0.0, 0.0
    for _ in range(20):
        h1 = stats.marginals + rng.standard_normal(stats.marginals.shape) * cal.marginal_noise_std()
        h2 = stats.pairs + rng.standard_normal(stats.pairs.shape) * cal.pair_noise_std()
        direct_err += float(np.sum((h1 - stats.marginals) ** 2))
        pooled_err += float(np.sum((pooled_marginals(measurement(h1, h2)) - stats.marginals) ** 2))
    assert pooled_err < 0.85 * direct_err, pooled_err / direct_err


def test_a_model_layout_has_the_measured_cells_and_pair_tables_split_in_counting_order():
    from splice_assets.layout import histogram_layout, pair_tables

    assert marginal_sizes(histogram_layout(LAYOUT, 4 * BINS), BINS) == marginal_sizes(LAYOUT, BINS)
    x = random_rows(np.random.default_rng(11), 300)
    counts = pair_counts(x, LAYOUT, PAIRS, BINS).counts
    cells = marginal_cells(x, LAYOUT, BINS)
    for (a, b), table in zip(PAIRS, pair_tables(counts, PAIRS, marginal_sizes(LAYOUT, BINS))):
        expected = np.zeros(table.shape)
        np.add.at(expected, (cells[:, a], cells[:, b]), 1)
        np.testing.assert_array_equal(table, expected)


def test_fine_tables_pool_into_the_coarse_targets_and_bins_off_the_grid_stay_empty():
    """An integer column on [0, 12] has 13 grid values in 16 coarse bins: each value's fine cell is the only one in
    its bin, so pooling averages two independent noisy counts of the same rows: the squared error halves (over 200
    seeded draws of 13 cells the ratio pooled / direct has sd about 0.02; measured 0.49, tolerance 0.6), and the 3
    bins holding no integer are 0 exactly. A nullable column (its missing rows count in a coarse bin but in no fine
    cell) and a categorical one keep their direct tables. Exact inputs give the exact tables back."""
    from splice_assets.fine_cells import fine_cells
    from splice_assets.postprocess.targets import marginal_targets, pooled_marginals

    schema = parse_schema({"name": "pool", "version": 1, "n_min": 2, "columns": [
        {"name": "count", "kind": "integer", "bounds": [0, 12]},
        {"name": "gappy", "kind": "integer", "bounds": [0, 12], "nullable": True},
        {"name": "kind", "kind": "categorical", "categories": ["a", "b", "c"]},
    ]})
    layout = layout_for(schema)
    rng = np.random.default_rng(4)
    n = 2_000
    x = np.column_stack([
        np.round(rng.uniform(0, 12, n)) / 6.0 - 1.0,
        np.round(rng.uniform(0, 12, n)) / 6.0 - 1.0,
        np.where(rng.random(n) < 0.1, 1.0, -1.0),
        rng.integers(0, 3, n) - 1.0,
    ])
    x[x[:, 2] > 0, 1] = 0.0  # a missing value's coordinate, as encoded
    plan, cal = measuring.make_plan(schema, n, 1.0, 1e-6, 16, 4, marginal_share=0.5, pair_share=0.0,
                                      grid_weight=1, interval_weight=1)
    stats = measuring.exact_statistics(x, plan, layout)
    cells = fine_cells(schema, plan.fine_bins)

    def measurement(h1: np.ndarray, fine: np.ndarray):
        return measuring.measurement_of(plan, cal, layout.d, stats.moments, h1, stats.pairs, fine=fine)

    sizes = np.cumsum(marginal_sizes(layout, plan.numeric_bins))[:-1]
    exact = np.split(stats.marginals, sizes)
    gaps = exact[0] == 0
    assert gaps.sum() == 3
    np.testing.assert_allclose(pooled_marginals(measurement(stats.marginals, stats.fine), cells), stats.marginals,
                               atol=1e-12)
    std = cal.marginal_noise_std()
    direct_err = pooled_err = 0.0
    for _ in range(200):
        h1 = stats.marginals + rng.standard_normal(stats.marginals.shape) * std
        fine = stats.fine + rng.standard_normal(stats.fine.shape) * std
        pooled = np.split(pooled_marginals(measurement(h1, fine), cells), sizes)
        direct = np.split(h1, sizes)
        assert np.all(pooled[0][gaps] == 0.0)
        for i in (1, 2, 3):
            np.testing.assert_allclose(pooled[i], direct[i], rtol=1e-12)
        direct_err += float(np.sum((direct[0] - exact[0])[~gaps] ** 2))
        pooled_err += float(np.sum((pooled[0] - exact[0])[~gaps] ** 2))
    assert pooled_err < 0.6 * direct_err, pooled_err / direct_err
    targets = marginal_targets(measurement(h1, fine), layout, 1.0, cells)
    assert targets is not None
    first = targets.per_coordinate(layout)[0]
    assert np.all(first[gaps] == 0.0) and first.sum() == pytest.approx(1.0)


def test_category_shrinkage_lowers_the_error_and_leaves_frequent_categories_alone():
    """A categorical table shrunk toward its mean cell (``fine_tables.shrunk_toward``, post-processing): 51
    near-uniform shares of 1-3% under noise std 0.9% per cell (churn's states at n = 4,000) keep 0.36 of their
    squared error; a skewed table (90% in one category, noise std 0.1%) keeps its frequent category exactly as
    measured and 0.30 of its error (over 200 seeded draws each; tolerance 0.6)."""
    from splice_assets.postprocess.fine_tables import shrunk_toward

    def shrunk(table: np.ndarray, std: float) -> np.ndarray:
        return shrunk_toward(table, np.full(len(table), table.mean()), std)

    rng = np.random.default_rng(12)
    flat = rng.uniform(1.0, 3.0, 51)
    flat /= flat.sum()
    skewed = np.array([0.9] + [0.1 / 9] * 9)
    for truth, std in ((flat, 0.009), (skewed, 0.001)):
        raw = after = 0.0
        for _ in range(200):
            noisy = truth + rng.standard_normal(len(truth)) * std
            out = shrunk(noisy, std)
            raw += float(np.sum((noisy - truth) ** 2))
            after += float(np.sum((out - truth) ** 2))
            assert out.sum() == pytest.approx(noisy.sum())
            if truth is skewed:
                assert out[0] == noisy[0]
        assert after < 0.6 * raw, after / raw


def test_only_categorical_targets_are_shrunk():
    """``marginal_targets`` shrinks the categorical coordinates' tables and leaves every numeric one as pooled."""
    from splice_assets.postprocess.targets import marginal_targets

    plan, cal = measuring.make_plan(SCHEMA, 400, 1.0, 1e-6, 16, 4, marginal_share=0.2, pair_share=0.5)
    x = random_rows(np.random.default_rng(8), 400)
    stats = measuring.exact_statistics(x, plan, LAYOUT)
    rng = np.random.default_rng(13)
    h1 = stats.marginals + rng.standard_normal(stats.marginals.shape) * cal.marginal_noise_std()
    h2 = stats.pairs + rng.standard_normal(stats.pairs.shape) * cal.pair_noise_std()
    noisy = measuring.measurement_of(plan, cal, LAYOUT.d, stats.moments, h1, h2)
    plain = marginal_targets(noisy, LAYOUT).per_coordinate(LAYOUT)
    shrunk = marginal_targets(noisy, LAYOUT, shrink_categories=True).per_coordinate(LAYOUT)
    for coordinate, before, after in zip(LAYOUT.coordinates, plain, shrunk):
        if coordinate.is_discrete and len(before) >= 4:
            assert not np.allclose(before, after), coordinate
        elif not coordinate.is_discrete:
            np.testing.assert_array_equal(before, after)


def test_ordinal_tables_shrunk_toward_their_smooth_shape_are_nearer_the_truth():
    """An ordinal column's noisy 1-way table shrunk toward its log-quadratic shape (``ordinal_shape``) is nearer the
    truth than one shrunk toward its mean cell: three of coil2000's 10-level ordinals (income and purchasing-power
    codes: skewed, unimodal with a heavy tail, decreasing), 1.4% noise std per cell (its pooled targets'),
    300 draws each, TVD after the projection onto the simplex. Measured: 0.93 of the mean-cell error (tolerance
    0.95), and fewer of the 1%-levels zeroed (49 against 122)."""
    from splice_assets.model.product_em import simplex_projection
    from splice_assets.postprocess.fine_tables import shrunk_toward
    from splice_assets.postprocess.targets import ordinal_shape

    truths = np.array([[0.4, 0.8, 11.2, 32.9, 31.5, 12.7, 6.5, 2.4, 1.2, 0.4],
                       [7.3, 6.5, 16.8, 23.8, 24.3, 12.4, 5.3, 2.4, 0.6, 0.7],
                       [55.7, 22.9, 12.8, 4.3, 2.9, 1.1, 0.1, 0.0, 0.1, 0.1]]) / 100.0
    rng = np.random.default_rng(21)
    std = 0.014
    error = {"mean": 0.0, "shape": 0.0}
    zeroed = {"mean": 0, "shape": 0}
    for truth in truths:
        truth = truth / truth.sum()
        for _ in range(300):
            noisy = truth + rng.standard_normal(len(truth)) * std
            for name, target in (("mean", np.full(len(truth), noisy.mean())), ("shape", ordinal_shape(noisy))):
                out = simplex_projection(shrunk_toward(noisy, target, std))
                error[name] += 0.5 * float(np.abs(out - truth).sum())
                zeroed[name] += int(np.sum((truth >= 0.01) & (out <= 0.0)))
    assert error["shape"] < 0.95 * error["mean"], error
    assert zeroed["shape"] <= zeroed["mean"], zeroed


def test_smooth_ordinals_touch_only_ordinal_columns_with_six_levels_or_more():
    """``marginal_targets(smooth_ordinals=True)`` changes the table of an ordinal column of 6 or more categories (not
    its missing level, left as pooled) and leaves a 5-level ordinal and the other columns as the mean-cell shrinkage
    has them."""
    from splice_assets.postprocess.targets import marginal_targets

    schema = parse_schema({"name": "ordinals", "version": 1, "n_min": 2, "columns": [
        {"name": "b", "kind": "categorical", "categories": list("uvwxyz")},
        {"name": "c", "kind": "ordinal", "categories": [1, 2, 3, 4, 5]},
        {"name": "e", "kind": "ordinal", "categories": list(range(10)), "nullable": True},
    ]})
    layout = layout_for(schema)
    assert [c.ordered for c in layout.coordinates] == [0, 5, 10]
    plan, cal = measuring.make_plan(schema, 400, 1.0, 1e-6, 16, 4, marginal_share=0.2, pair_share=0.5)
    rng = np.random.default_rng(5)
    x = np.column_stack([c.grid()[rng.integers(c.levels, size=400)] for c in layout.coordinates])
    stats = measuring.exact_statistics(x, plan, layout)
    h1 = stats.marginals + rng.standard_normal(stats.marginals.shape) * cal.marginal_noise_std()
    h2 = stats.pairs + rng.standard_normal(stats.pairs.shape) * cal.pair_noise_std()
    noisy = measuring.measurement_of(plan, cal, layout.d, stats.moments, h1, h2)
    plain = marginal_targets(noisy, layout, shrink_categories=True).per_coordinate(layout)
    smooth = marginal_targets(noisy, layout, shrink_categories=True, smooth_ordinals=True).per_coordinate(layout)
    np.testing.assert_array_equal(plain[0], smooth[0])
    np.testing.assert_array_equal(plain[1], smooth[1])
    assert not np.allclose(plain[2][:10], smooth[2][:10])
    assert smooth[2][10] == marginal_targets(noisy, layout).per_coordinate(layout)[2][10]
