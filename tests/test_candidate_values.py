"""Candidate values (decision 0051): public values a column may hold often, each a fine cell of the main measurement,
drawn exactly where the noisy count clears ``candidate_z`` and read as empty elsewhere; what ``values: auto`` leaves
there; and ``float32`` output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splice_assets import Synthesizer
from splice_assets.fine_cells import candidate_z, column_fine_cells
from splice_assets.layout import decode
from splice_assets.measurement import RELATION_ADD_REMOVE
from splice_assets.postprocess.fine_tables import FineTables
from splice_assets.private.bounds import unfound_candidates
from splice_assets.schema import SchemaError, parse_schema, schema_to_dict


def share_schema(**share):
    return parse_schema({"name": "shares", "version": 1, "n_min": 1000, "columns": [
        {"name": "share", "kind": "continuous", "bounds": [0, 1], **share},
        {"name": "group", "kind": "categorical", "categories": ["a", "b"]}]})


def test_candidates_and_float32_parse_round_trip_and_are_refused_with_the_entry():
    schema = share_schema(candidates=[0.5, 0.25], values=[1], float32=True)
    share = schema.column("share")
    assert share.candidates == (0.25, 0.5) and share.float32 and share.exact_values == (1.0,)
    assert parse_schema(schema_to_dict(schema)) == schema
    for entry, problem in [({"candidates": [2]}, "inside the bounds"),
                           ({"candidates": [0.5], "values": [0.5]}, "both as a candidate"),
                           ({"float32": "yes"}, "float32 must be true or false")]:
        with pytest.raises(SchemaError, match=problem):
            share_schema(**entry)
    with pytest.raises(SchemaError, match="on a continuous column"):
        parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
            {"name": "n", "kind": "integer", "bounds": [0, 9], "float32": True}]})


def test_values_auto_leaves_its_unfound_point_candidates_and_no_estimated_bound():
    found = share_schema(values=[0.5]).column("share")
    left = unfound_candidates(found, (False, False))
    assert 0.5 not in left and {0.0, 1.0, 2 / 3, 1 / 12} <= set(left) and len(left) == 2 + 45 - 1
    assert {0.0, 1.0}.isdisjoint(unfound_candidates(found, (True, True)))  # estimated ends hold clipped rows
    grid = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "n", "kind": "integer", "bounds": [0, 100_000]}]}).column("n")
    assert unfound_candidates(grid, (False, False)) == ()  # a grid's points stay with the selection


def test_a_candidate_below_the_threshold_is_no_cell_and_its_rows_stay_in_the_bin():
    """A bin of 16 equal intervals holding 6% of the rows, with two candidates in it: one at 20 noise sd, one at
    2 (below ``candidate_z``). The weak one gets no mass (its count goes to its interval), the strong one keeps its
    count, and the bin its mass."""
    spec = share_schema(candidates=[0.5, 0.51]).column("share")
    column = column_fine_cells(spec, 0, None, 256)
    assert column.tentative == (0.5, 0.51) and column.n_cells == 2 + 256
    noise_std = 0.001
    table = np.zeros(column.n_cells)
    parents = np.asarray(column.parents)
    bin_ = parents[column.points.index(0.5)]
    intervals = np.flatnonzero((parents == bin_) & (np.arange(column.n_cells) >= 2))
    table[intervals] = 0.06 / len(intervals)
    table[column.points.index(0.5)] = 20 * noise_std
    table[column.points.index(0.51)] = 2 * noise_std
    coarse = np.zeros(16)
    coarse[bin_] = 0.06 + 22 * noise_std
    weights = FineTables(table, noise_std, 256).consistent(column, table, coarse)
    assert weights[column.points.index(0.51)] == 0.0
    assert weights[column.points.index(0.5)] == pytest.approx(20 * noise_std, rel=0.05)
    assert weights.sum() == pytest.approx(coarse[bin_])
    # Unshrunk, the weak candidate's count is back in the interval that holds 0.51.
    weights = FineTables(table, noise_std, 256, shrink=False).consistent(column, table, coarse)
    holder = column.interval_cells(column.cube(np.array([0.51])))[0]
    others = np.setdiff1d(intervals, holder)
    assert weights[holder] - weights[others].mean() == pytest.approx(2 * noise_std)
    assert candidate_z(2) == 4.0 and candidate_z(10_000) > 4.4


def test_a_release_draws_the_candidates_its_rows_hold_exactly_as_float32_and_no_other():
    """20,000 float32-written shares, 2/3 in 5% of the rows; candidates 2/3 and 1/4, which no row holds. The
    fine cells' noise sd is about 0.002 here, so 2/3 clears 4 sd by far and 1/4 passes with p < 1e-4."""
    schema = share_schema(candidates=[2 / 3, 0.25], float32=True)
    rng = np.random.default_rng(11)
    n = 20_000
    share = rng.beta(2, 3, n)
    share[rng.random(n) < 0.05] = 2 / 3
    share[np.abs(share - 0.25) < 1e-6] = 0.3
    table = pd.DataFrame({"share": share.astype(np.float32).astype(np.float64), "group": rng.choice(["a", "b"], n)})
    synth = Synthesizer(schema, 1.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
    rows = synth.sample(n, seed=0)["share"].to_numpy()
    two_thirds = float(np.float32(2 / 3))
    # Sampling sd 0.0015 at 20,000 rows plus the cell's noise (about 0.002): 0.02 is beyond 6 sd.
    assert abs(np.mean(rows == two_thirds) - 0.05) < 0.02
    assert np.mean(rows == 0.25) == 0.0
    assert np.array_equal(rows, rows.astype(np.float32).astype(np.float64)) and rows.min() >= 0 and rows.max() <= 1


def test_float32_output_stays_inside_bounds_that_are_not_float32():
    schema = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "x", "kind": "continuous", "bounds": [0.1, 0.6309573444801936], "float32": True}]})
    values = decode(np.array([[-1.0], [1.0], [0.0]]), schema)["x"].to_numpy()
    assert values.min() >= 0.1 and values.max() <= 0.6309573444801936
    assert np.array_equal(values, values.astype(np.float32).astype(np.float64))
