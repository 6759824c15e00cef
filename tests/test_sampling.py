"""Sampling, decoding and storage of fitted mixtures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splice_assets.layout import layout_for
from splice_assets.model.mixture import MixtureParameters
from splice_assets.private.validation import conform
from splice_assets.sampling import (
    from_parameters,
    load_model,
    sample_cube,
    sample_table,
    save_model,
)
from splice_assets.schema import parse_schema

SCHEMA = parse_schema(
    {
        "name": "toy",
        "version": 1,
        "n_min": 10,
        "columns": [
            {"name": "age", "kind": "integer", "bounds": [0, 100]},
            {"name": "income", "kind": "continuous", "bounds": [0, 1000], "nullable": True},
            {"name": "colour", "kind": "categorical", "categories": ["r", "g", "b"], "nullable": True},
            {"name": "flag", "kind": "boolean"},
        ],
    }
)


def _model():
    layout = layout_for(SCHEMA)  # age, income, income-missing, colour(4 levels), flag(2)
    K = 2
    params = MixtureParameters(
        weights=np.array([0.3, 0.7]),
        probs=(
            np.array([[0.9, 0.1], [0.7, 0.3]]),
            np.array([[0.2, 0.3, 0.4, 0.1], [0.5, 0.2, 0.1, 0.2]]),
            np.array([[0.5, 0.5], [0.1, 0.9]]),
        ),
        means=np.array([[-0.5, 0.2], [0.4, -0.3]]),
        factors=np.array([[[0.1], [0.05]], [[0.0], [0.1]]]),
        diag=np.array([[0.01, 0.02], [0.005, 0.01]]),
    )
    assert params.K == K
    return from_parameters(params, layout)


def test_sample_cube_on_grid_clipped_and_deterministic():
    model = _model()
    x = sample_cube(model, 200_000, seed=3)
    assert x.shape == (200_000, model.layout.d)
    assert np.all(np.abs(x) <= 1.0)
    for t, i in enumerate(model.layout.discrete_index):
        grid = model.layout.coordinates[i].grid()
        assert np.all(np.isin(x[:, i], grid))
        freq = np.array([(x[:, i] == g).mean() for g in grid])
        assert np.allclose(freq, model.params.weights @ model.params.probs[t], atol=0.005)
    assert np.allclose(x[:, 0].mean(), model.params.weights @ model.params.means[:, 0], atol=0.005)
    assert np.array_equal(x, sample_cube(model, 200_000, seed=3))
    assert not np.array_equal(x, sample_cube(model, 200_000, seed=4))


def test_sample_table_is_schema_valid_with_missing_rate():
    model = _model()
    table = sample_table(model, SCHEMA, 50_000, seed=1)
    conform(table, SCHEMA)
    assert list(table.columns) == list(SCHEMA.column_names)
    expected = model.params.weights @ model.params.probs[0][:, 1]  # P(income missing) = P(indicator = +1)
    assert abs(table["income"].isna().mean() - expected) < 0.01
    expected_colour = model.params.weights @ model.params.probs[1][:, 3]
    assert abs(table["colour"].isna().mean() - expected_colour) < 0.01
    assert isinstance(table["colour"].dtype, pd.CategoricalDtype)


def test_save_load_roundtrip(tmp_path):
    model = _model()
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.layout == model.layout
    assert np.array_equal(sample_cube(loaded, 1000, 7), sample_cube(model, 1000, 7))


def test_matched_sampling_widens_components_and_still_hits_the_marginals():
    """``spread`` scales continuous deviations only when rows are matched; matching still fixes every 1-way count."""
    import dataclasses

    import pytest

    from splice_assets.layout import marginal_sizes
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.private.statistics import marginal_counts
    from splice_assets.sampling import target_counts

    model = _model()
    layout = model.layout
    unmatched = [sample_cube(model, 20_000, seed=5, match_marginals=False, spread=s) for s in (1.0, 2.0)]
    np.testing.assert_array_equal(unmatched[0], unmatched[1])  # a plain model draw ignores the spread
    with pytest.raises(ValueError, match="spread"):
        sample_cube(model, 10, seed=5, spread=0.5)

    sizes = marginal_sizes(layout, 8)
    freq = np.concatenate([np.random.default_rng(1).dirichlet(np.ones(s)) for s in sizes])
    matched_model = dataclasses.replace(model, marginal_targets=MarginalTargets(freq, 1.0, 8))
    x1, x2 = (sample_cube(matched_model, 20_000, seed=5, spread=s) for s in (1.0, 2.0))
    counts = marginal_counts(x2, layout, 8).counts
    expected = np.concatenate([target_counts(f, 20_000) for f in np.split(freq, np.cumsum(sizes)[:-1])])
    np.testing.assert_array_equal(counts, expected)
    # Widening moves rows between cells before matching, so the joint (not the marginals) changes.
    assert not np.array_equal(x1, x2)


def test_the_cells_kernel_matches_the_per_column_reference():
    """``marginal_cells`` (compiled) against ``coordinate_cells`` column by column on values clipped to [-1, 1] with
    NaN as 0: equal on NaN, +-inf, values outside the cube and exact grid points, for row- and column-major input."""
    from splice_assets.layout import Coordinate, EncodingLayout, coordinate_cells, marginal_cells

    layout = EncodingLayout((Coordinate("a", "value", 0), Coordinate("b", "value", 5), Coordinate("c", "value", 1),
                             Coordinate("d", "binned", 64), Coordinate("e", "value", 2)))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.3, 1.3, (20_001, 5))
    x[::7, 0], x[::11, 1], x[::13, 3], x[::17, 4] = np.nan, np.inf, -np.inf, np.nan
    x[::5, 1] = np.round(x[::5, 1] * 2) / 2
    clipped = np.clip(np.nan_to_num(x, nan=0.0), -1.0, 1.0)
    expected = np.stack([coordinate_cells(clipped[:, i], c, 16) for i, c in enumerate(layout.coordinates)], axis=1)
    for rows in (x, np.asfortranarray(x)):
        np.testing.assert_array_equal(marginal_cells(rows, layout, 16), expected)


def test_matching_by_counts_is_rank_matching_with_random_ties():
    """``assign_by_counts``: exactly the target counts, the order of the source cells kept (a row in a lower cell
    never lands above one in a higher cell), and which rows of a split cell move is random: independent of the
    rows' positions (first and second half of the rows move at shares within 0.02 of each other, 40,000 rows)."""
    from splice_assets.cell_kernels import assign_by_counts

    rng = np.random.default_rng(3)
    cells = rng.integers(0, 6, 40_000)
    counts = np.array([9_000, 0, 5_000, 11_000, 7_000, 8_000])
    assigned = assign_by_counts(cells, 6, counts, rng)
    np.testing.assert_array_equal(np.bincount(assigned, minlength=6), counts)
    highest_below = np.array([assigned[cells == c].max() for c in range(6)])
    lowest_above = np.array([assigned[cells == c].min() for c in range(6)])
    assert np.all(highest_below[:-1] <= lowest_above[1:])
    moved = assigned != cells
    split = cells == np.argmax([len(np.unique(assigned[cells == c])) for c in range(6)])
    half = np.arange(len(cells)) < len(cells) // 2
    assert abs(moved[split & half].mean() - moved[split & ~half].mean()) < 0.02
    # Finer order cells nested in the targets (4 per target cell) keep their order too.
    finer = rng.integers(0, 24, 40_000)
    coarse = assign_by_counts(finer, 24, counts, rng)
    assert np.all(np.diff([coarse[finer == f].mean() for f in range(24)]) >= 0)


def test_alias_tables_reproduce_their_distributions_exactly():
    """Walker's tables imply p_j = (keep_j + sum of (1 - keep_i) over the cells i aliased to j) / m: equal to the
    input (normalised), zeros included; an all-zero table is uniform."""
    from splice_assets.cell_kernels import alias_tables

    rng = np.random.default_rng(5)
    tables = [rng.dirichlet(np.ones(7), size=3), np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])]
    tables[0][1, 2] = 0.0
    for table in tables:
        keep, alias = alias_tables(table.ravel(), np.array([0]), np.array([table.shape[1]]), len(table))
        for t, row in enumerate(table):
            m = len(row)
            k, a = keep[t * m:(t + 1) * m], alias[t * m:(t + 1) * m]
            implied = (k + np.bincount(a, weights=1.0 - k, minlength=m)) / m
            want = row / row.sum() if row.sum() > 0 else np.full(m, 1.0 / m)
            np.testing.assert_allclose(implied, want, atol=1e-12)


def test_a_model_written_with_the_options_removed_in_issue_66_still_loads(tmp_path):
    """Models written before issue 66 carry the removed fit options in their config (``candidate_K``,
    ``link_null``, ...), ``holdout_losses`` and the fine tables' ``smooth`` / ``tail_runs`` (all off by default): they
    load as before, the removed keys dropped; this code writes none of them. A model written with a removed fine-table
    option on would sample differently now, so it is refused, naming the option."""
    import dataclasses
    import json

    import pytest

    from splice_assets.postprocess.fine_tables import FineTables

    model = dataclasses.replace(_model(), fine=FineTables(np.full(8, 0.125), 0.01, 256, couplings=((1, 0, 0.9),)))
    save_model(model, tmp_path / "m")
    meta = json.loads((tmp_path / "m.json").read_text())
    assert "holdout_losses" not in meta and not {"smooth", "tail_runs"} & set(meta["fine"])
    removed = {"candidate_K": [1, 3], "holdout_direction_fraction": 0.25, "link_null": False, "smooth_numerics": False,
               "nonnegative_levels": False, "shrink_pairs": False, "shrink_strong_pairs": False,
               "fine_smoothing": False, "fine_tail_runs": False}
    old = {**meta, "config": {**meta["config"], **removed}, "holdout_losses": {"1": 0.5, "3": 0.4},
           "fine": {**meta["fine"], "smooth": False, "tail_runs": False}}
    (tmp_path / "m.json").write_text(json.dumps(old))
    loaded = load_model(tmp_path / "m")
    assert loaded.config == model.config
    assert loaded.fine is not None and model.fine is not None
    assert dataclasses.replace(loaded.fine, frequencies=model.fine.frequencies) == model.fine
    np.testing.assert_array_equal(loaded.fine.frequencies, model.fine.frequencies)
    assert np.array_equal(sample_cube(loaded, 1000, 7), sample_cube(model, 1000, 7))
    for option in ("smooth", "tail_runs"):
        (tmp_path / "m.json").write_text(json.dumps({**old, "fine": {**old["fine"], option: True}}))
        with pytest.raises(ValueError, match=f"'{option}'.*removed in issue 66"):
            load_model(tmp_path / "m")
