"""Linked coordinates (``links``): near-functional pairs chosen from noisy 2-way tables, redrawn from their
conditionals, and wired into ``chain.fit``, sampling, the stored model and the release record."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from toy import TOY_SCHEMA, toy_measurement

from splice_assets.layout import (
    coordinate_pairs,
    layout_for,
    marginal_cells,
    marginal_sizes,
    pair_tables,
)
from splice_assets.model.fit import FitConfig
from splice_assets.postprocess import chain
from splice_assets.postprocess.links import (
    Link,
    choose_links,
    describe,
    goodman_kruskal,
    redraw_linked,
)
from splice_assets.private.statistics import pair_counts

SCHEMA = TOY_SCHEMA
LAYOUT = layout_for(SCHEMA)  # a: numeric, b: categorical x / y / z, c: ordinal 1..5
PAIRS = coordinate_pairs(LAYOUT)
BINS = 16
SIZES = marginal_sizes(LAYOUT, BINS)


def _functional_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """c is a function of b (x -> 1, y -> 3, z -> 5); a is independent of both."""
    b = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    return np.column_stack([
        rng.uniform(-1, 1, n), LAYOUT.coordinates[1].grid()[b], LAYOUT.coordinates[2].grid()[2 * b],
    ])


def _pair_frequencies(rows: np.ndarray) -> np.ndarray:
    return pair_counts(rows, LAYOUT, PAIRS, BINS).frequencies(len(rows))


def _b_c_tvd(a: np.ndarray, b: np.ndarray) -> float:
    index = PAIRS.index((1, 2))
    tables = [pair_tables(_pair_frequencies(rows), PAIRS, SIZES)[index] for rows in (a, b)]
    return float(0.5 * np.abs(tables[0] - tables[1]).sum())


def test_a_functional_pair_is_linked_and_an_independent_one_is_not():
    rows = _functional_rows(np.random.default_rng(0), 5_000)
    links = choose_links(_pair_frequencies(rows), PAIRS, LAYOUT, BINS, min_lambda=0.6)
    assert [(link.source, link.target) for link in links] == [(1, 2)]  # lambda 1 both ways: the lower source first
    assert links[0].strength == pytest.approx(1.0)
    assert np.allclose(links[0].conditional[[0, 1, 2], [0, 2, 4]], 1.0)
    assert np.allclose(links[0].conditional.sum(axis=1), 1.0)


def test_the_choice_survives_the_mechanisms_noise():
    """The tables with Gaussian noise of std 0.004 per cell (about adult's at eps = 1), seeded: still the one link,
    lambda > 0.9 (measured 0.99); no link touches the independent numeric column."""
    rng = np.random.default_rng(1)
    exact = _pair_frequencies(_functional_rows(rng, 5_000))
    noisy = exact + rng.normal(0.0, 0.004, exact.shape)
    links = choose_links(noisy, PAIRS, LAYOUT, BINS, min_lambda=0.6)
    assert [{link.source, link.target} for link in links] == [{1, 2}]  # the direction is noise's choice here
    assert links[0].strength > 0.9


def test_a_target_with_one_dominant_cell_is_skipped():
    """lambda is unstable when the target's commonest cell holds nearly all the mass; ``min_spread`` skips it."""
    rng = np.random.default_rng(2)
    rows = _functional_rows(rng, 4_000)
    rows[:, 2] = np.where(rng.random(4_000) < 0.9, LAYOUT.coordinates[2].grid()[0], rows[:, 2])
    targets = {link.target for link in choose_links(_pair_frequencies(rows), PAIRS, LAYOUT, BINS, 0.01, min_spread=0.2)}
    assert 2 not in targets


def test_every_coordinate_is_in_at_most_one_link_and_targets_are_discrete():
    """a (numeric) sits in one third of [-1, 1] per level of b, and c is a function of b: all three pairs are
    functional both ways, but only one link is kept, and a numeric coordinate is never a target."""
    rng = np.random.default_rng(3)
    b = rng.choice(3, size=3_000)
    rows = np.column_stack([-1 + (2 * b + 1) / 3 + rng.uniform(-0.1, 0.1, 3_000),
                            LAYOUT.coordinates[1].grid()[b], LAYOUT.coordinates[2].grid()[2 * b]])
    links = choose_links(_pair_frequencies(rows), PAIRS, LAYOUT, BINS, min_lambda=0.6)
    used = [i for link in links for i in (link.source, link.target)]
    assert len(links) == 1 and len(used) == len(set(used)) and links[0].target != 0
    frequencies = pair_counts(rows, LAYOUT, [(0, 1)], BINS).frequencies(len(rows))
    [only] = choose_links(frequencies, [(0, 1)], LAYOUT, BINS, min_lambda=0.6)
    assert (only.source, only.target) == (0, 1)


def test_redrawn_targets_follow_the_conditional_and_sources_stay():
    """n = 200,000 draws; every conditional frequency within 0.01 of the table (4.5 s.e. at worst)."""
    conditional = np.array([[0.7, 0.0, 0.3, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5, 0.5], [0.2, 0.2, 0.2, 0.2, 0.2]])
    rng = np.random.default_rng(4)
    rows = np.column_stack([rng.uniform(-1, 1, 200_000), LAYOUT.coordinates[1].grid()[rng.integers(0, 3, 200_000)],
                            np.zeros(200_000)])
    out = redraw_linked(rows, LAYOUT, BINS, [Link(1, 2, conditional, 1.0)], np.random.default_rng(5))
    assert np.array_equal(out[:, :2], rows[:, :2])
    cells = marginal_cells(out, LAYOUT, BINS)
    for level in range(3):
        observed = np.bincount(cells[cells[:, 1] == level, 2], minlength=5) / np.sum(cells[:, 1] == level)
        assert np.max(np.abs(observed - conditional[level])) < 0.01
    assert np.isin(out[:, 2], LAYOUT.coordinates[2].grid()).all()


def test_matching_a_linked_pair_moves_the_fewest_rows_and_keeps_the_function():
    """1-way targets that take b from 50 / 30 / 20% to 45 / 33 / 22%, and c in step (c = f(b)). Rank matching shifts
    rows to neighbouring cells (x -> y -> z: 1,400 moves per column), each column on its own, and breaks c = f(b)
    in 13% of the rows (measured); matching with the link moves only x's 1,000 surplus rows per column and keeps
    the function in every row."""
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.sampling import match_to_marginals

    n = 20_000
    rows = _functional_rows(np.random.default_rng(10), n)
    rows[:, 1:] = np.array([[-1.0, -1.0]] * (n // 2) + [[0.0, 0.0]] * (3 * n // 10) + [[1.0, 1.0]] * (n // 5))
    a_freq = np.bincount(marginal_cells(rows, LAYOUT, BINS)[:, 0], minlength=BINS) / n
    targets = MarginalTargets(np.concatenate([a_freq, [0.45, 0.33, 0.22], [0.45, 0, 0.33, 0, 0.22]]), 1.0, BINS)
    conditional = np.array([[1.0, 0, 0, 0, 0], [0, 0, 1.0, 0, 0], [0, 0, 0, 0, 1.0]])
    kept = {}
    for name, links in (("rank", ()), ("linked", (Link(1, 2, conditional, 1.0),))):
        out = match_to_marginals(rows, LAYOUT, targets, np.random.default_rng(11), links=links)
        cells = marginal_cells(out, LAYOUT, BINS)
        assert np.array_equal(np.bincount(cells[:, 1], minlength=3), [9_000, 6_600, 4_400])
        assert np.array_equal(np.bincount(cells[:, 2], minlength=5), [9_000, 0, 6_600, 0, 4_400])
        kept[name] = float(np.mean(cells[:, 2] == 2 * cells[:, 1]))
        if links:
            moved = marginal_cells(rows, LAYOUT, BINS)[:, 1:] != cells[:, 1:]
            assert moved.sum(axis=0).tolist() == [1_000, 1_000]
    assert kept["linked"] == 1.0 and kept["rank"] < 0.95, kept


@pytest.mark.parametrize("favourite", [None, 0])
def test_fewest_moves_hits_the_counts_moving_only_the_surplus(favourite):
    """Random cells and counts; affinity uniform, or all of it on cell 0 (short of few rows: most rows are turned
    away and draw again, and rows with no affinity for any short cell go by the shortfall)."""
    from splice_assets.sampling import fewest_moves

    rng = np.random.default_rng(12)
    cells = rng.integers(0, 6, 5_000)
    counts = rng.multinomial(5_000, [0.1, 0.2, 0.3, 0.1, 0.2, 0.1])
    affinity = np.ones((4, 6)) if favourite is None else np.eye(6)[[favourite] * 4]
    out = fewest_moves(cells, counts, rng, affinity, rng.integers(0, 4, 5_000))
    assert np.array_equal(np.bincount(out, minlength=6), counts)
    surplus = np.maximum(np.bincount(cells, minlength=6) - counts, 0).sum()
    assert np.sum(out != cells) == surplus > 0


def test_a_moved_numeric_source_lands_inside_its_new_cell_not_at_its_edge():
    """Numeric a (source of a link to b) all in bin 0, targets putting half of it in bin 8: the moved values spread
    over bin 8 (sd of a uniform on the bin: 0.29 bin widths; bound 0.2) and the others stay where they were."""
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.sampling import match_to_marginals

    n, width = 4_000, 2.0 / BINS
    rng = np.random.default_rng(13)
    rows = np.column_stack([-1.0 + rng.random(n) * width, np.full(n, -1.0), np.full(n, -1.0)])
    a_freq = np.zeros(BINS)
    a_freq[[0, 8]] = 0.5
    targets = MarginalTargets(np.concatenate([a_freq, [1.0, 0, 0], [1.0, 0, 0, 0, 0]]), 1.0, BINS)
    conditional = np.tile([1.0, 0.0, 0.0], (BINS, 1))
    out = match_to_marginals(rows, LAYOUT, targets, np.random.default_rng(14), links=(Link(0, 1, conditional, 1.0),))
    moved = marginal_cells(out, LAYOUT, BINS)[:, 0] == 8
    assert moved.sum() == n // 2 and np.array_equal(out[~moved, 0], rows[~moved, 0])
    assert np.std(out[moved, 0]) / width > 0.2


def test_a_one_component_fit_gets_the_functional_pair_from_the_link():
    """K = 1 (a product of the marginals) and no tilt: b x c TVD against the rows > 0.4 without the link, < 0.1
    with it (measured 0.61 / 0.005; n = 4,000, eps = 2, seeded noise)."""
    from splice_assets.sampling import sample_cube

    rows = _functional_rows(np.random.default_rng(7), 4_000)
    measurement = toy_measurement(rows)
    config = FitConfig(K=1, max_steps=60, min_steps=10, em_iterations=0, tilt_chi2=0.0)
    plain = chain.fit(measurement, SCHEMA, dataclasses.replace(config, link_lambda=0.0))
    linked = chain.fit(measurement, SCHEMA, config)
    assert plain.links == () and [{link.source, link.target} for link in linked.links] == [{1, 2}]
    without, with_link = (_b_c_tvd(sample_cube(m, 4_000, 0), rows) for m in (plain, linked))
    assert without > 0.4 and with_link < 0.1, (without, with_link)
    [record] = describe(linked.links, linked.layout)
    assert {record["source"], record["target"]} == {"b", "c"} and record["lambda"] > 0.9


def test_links_survive_save_and_load(tmp_path):
    from splice_assets.sampling import load_model, sample_cube, save_model

    rows = _functional_rows(np.random.default_rng(8), 2_000)
    model = chain.fit(toy_measurement(rows), SCHEMA, FitConfig(K=2, max_steps=30, min_steps=10))
    assert model.links and model.tilt is not None
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    for saved, restored in zip(model.links, loaded.links, strict=True):
        assert (saved.source, saved.target, saved.strength) == (restored.source, restored.target, restored.strength)
        assert np.array_equal(saved.conditional, restored.conditional)
    assert np.array_equal(sample_cube(model, 500, seed=3), sample_cube(loaded, 500, seed=3))


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), True, "0.6"])
def test_bad_link_settings_are_rejected_before_fitting_quoting_the_value(value):
    rows = _functional_rows(np.random.default_rng(9), 300)
    with pytest.raises(ValueError, match=f"link_lambda .* got {value!r}"):
        chain.fit(toy_measurement(rows), SCHEMA, dataclasses.replace(FitConfig(), link_lambda=value))


def test_goodman_kruskal_is_one_for_a_function_and_zero_without_dependence():
    function = np.array([[0.5, 0.0], [0.0, 0.3], [0.2, 0.0]])
    assert goodman_kruskal(function) == pytest.approx(1.0)
    assert goodman_kruskal(np.outer([0.2, 0.3, 0.5], [0.7, 0.3])) == pytest.approx(0.0)
    assert goodman_kruskal(np.array([[0.6, 0.0], [0.4, 0.0]])) == 0.0  # one column holds everything


def test_cells_within_the_noise_leave_the_conditional():
    """The functional table with noise of std .004 a cell (seeded): kept at z = 3 (``FitConfig.link_cell_z``), every
    source cell's row is its one function cell; with every cell kept (z = 0) the noise of the empty cells still puts
    mass off the function."""
    rng = np.random.default_rng(2)
    noisy = _pair_frequencies(_functional_rows(rng, 5_000))
    noisy = noisy + rng.normal(0.0, 0.004, noisy.shape)
    [denoised] = choose_links(noisy, PAIRS, LAYOUT, BINS, min_lambda=0.6, cell_noise=0.004, cell_z=3.0)
    [raw] = choose_links(noisy, PAIRS, LAYOUT, BINS, min_lambda=0.6)
    on_function = (lambda link: link.conditional[[0, 1, 2], [0, 2, 4]]) if denoised.source == 1 else (
        lambda link: link.conditional[[0, 2, 4], [0, 1, 2]])
    assert np.allclose(on_function(denoised), 1.0)
    assert on_function(raw).min() < 0.999


def test_balancing_gives_rows_without_information_to_the_cells_the_others_leave_short():
    """b -> c with b's rare level x (5% of the rows) uninformative (its row is c's marginal) and y, z pinned to 3 and
    5; the 1-way targets say c = 1 holds 5%. Balanced, x's rows go to c = 1 and the link carries b's target onto
    c's to within .05% of the rows (100 rounds of proportional fitting: the limit puts 0 in cells that start
    positive, which it nears as 1 / rounds)."""
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.postprocess.links import balanced

    b_target, c_target = np.array([0.05, 0.55, 0.40]), np.array([0.05, 0.0, 0.55, 0.0, 0.40])
    conditional = np.array([c_target, [0, 0, 1, 0, 0], [0, 0, 0, 0, 1]], dtype=np.float64)
    tables = [np.full(SIZES[0], 1.0 / SIZES[0]), b_target, c_target]
    targets = MarginalTargets(np.concatenate(tables), 1.0, BINS)
    [link] = balanced([Link(1, 2, conditional, 1.0)], targets, LAYOUT)
    assert link.conditional[0, 0] > 0.98 and link.conditional[1:, [2, 4]] == pytest.approx(np.eye(2))
    assert b_target @ link.conditional == pytest.approx(c_target, abs=5e-4)
    assert conditional[0, 0] == pytest.approx(0.05)  # the row it started from

