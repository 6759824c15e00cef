"""``values: auto``: a DP selection of a column's frequent exact values among its public candidates, in the DP-bounds
charge (``private.bounds``). Noise comes from OS entropy, so the statistical assertions use margins that fail with
probability below 1e-6 (stated at each)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
import yaml

from splice_assets import Synthesizer
from splice_assets.layout import FLOAT32_TOLERANCE
from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
from splice_assets.private import bounds, partitions
from splice_assets.private.validation import clean_records
from splice_assets.schema import SchemaError, parse_schema, schema_to_dict

SCHEMA = {"name": "spikes", "version": 1, "n_min": 1000, "columns": [
    {"name": "limit", "kind": "integer", "bounds": [0, 50000], "values": "auto"},
    {"name": "share", "kind": "continuous", "bounds": [0, 1], "values": "auto"},
    {"name": "price", "kind": "continuous", "bounds": [0, 100], "decimals": 1, "values": "auto"},
    {"name": "small", "kind": "integer", "bounds": [0, 20], "values": "auto"},
    {"name": "group", "kind": "categorical", "categories": ["a", "b"]},
]}


def spiky_table(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """30% of limits at 20,000, a quarter of shares at exactly 1, a fifth of prices at 9.9, the rest spread."""
    limit = rng.integers(0, 50001, n)
    limit[rng.random(n) < 0.3] = 20000
    share = rng.random(n)
    share[rng.random(n) < 0.25] = 1.0
    price = np.round(rng.uniform(0, 100, n), 1)
    price[rng.random(n) < 0.2] = 9.9
    return pd.DataFrame({"limit": limit, "share": share, "price": price, "small": rng.integers(0, 21, n),
                         "group": rng.choice(["a", "b"], n)})


def test_values_auto_parses_round_trips_and_is_refused_off_numeric_columns():
    schema = parse_schema(SCHEMA)
    assert [c.values_auto for c in schema.columns] == [True, True, True, True, False]
    assert parse_schema(schema_to_dict(schema)) == schema
    column = {"name": "x", "kind": "integer", "bounds": [0, 9], "values": [9, "auto"]}
    both = parse_schema({**SCHEMA, "columns": [column]})
    assert (both.columns[0].values, both.columns[0].values_auto) == ((9.0,), True)
    assert parse_schema(schema_to_dict(both)) == both
    bad = yaml.safe_load("{name: t, version: 1, n_min: 10, columns: [{name: g, kind: categorical, categories: [a], "
                         "values: auto}]}")
    with pytest.raises(SchemaError, match="column 'g'.*values: auto belongs to numeric columns"):
        parse_schema(bad)


def test_candidates_are_the_public_grid_or_the_bounds_zero_and_a_proportions_fractions():
    limit, share, price, small = (bounds.value_candidates(c) for c in parse_schema(SCHEMA).columns[:4])
    assert (limit.size, limit.first, limit.step) == (50001, 0.0, 1.0)
    assert share.points[:3] == (0.0, 1 / 12, 1 / 11) and share.points[-2:] == (11 / 12, 1.0)
    assert share.size == 2 + 45 and 0.5 in share.points and 2 / 3 in share.points  # q <= 12: 45 in (0, 1)
    assert (price.size, price.step) == (1001, pytest.approx(0.1))
    assert small is None  # 21 integers: each has a fine cell already
    assert limit.index_of(np.array([20000.0, 20000.5, -1.0, np.nan])).tolist() == [20000, -1, -1, -1]
    assert price.index_of(np.array([9.9, 100.0])).tolist() == [99, 1000]
    signed = parse_schema({**SCHEMA, "columns": [{"name": "x", "kind": "continuous", "bounds": [-5, 5],
                                                  "values": [5]}]}).columns[0]
    assert bounds.value_candidates(signed).points == (-5.0, 0.0)  # 5 is declared already
    narrow = parse_schema({**SCHEMA, "columns": [{"name": "x", "kind": "continuous", "bounds": [0.2, 0.5],
                                                  "values": [0.333333333333, "auto"]}]}).columns[0]
    points = bounds.value_candidates(narrow).points
    assert points[:2] == (0.2, 2 / 9) and points[-2:] == (5 / 11, 0.5)  # inside the bounds only
    assert 1 / 3 not in points  # declared (to 12 decimals) already


def test_a_share_written_from_float32_is_its_fraction():
    """Data written from float32 (2/3 as 0.6666666865348816) count toward 2/3; the fractions lie 1/132 apart or
    more, so a value still matches one candidate at most."""
    share = bounds.value_candidates(parse_schema(SCHEMA).columns[1])
    values = np.array([np.float32(2 / 3), np.float32(0.5), 2 / 3 + 1e-6, np.float32(0.1234)], dtype=np.float64)
    assert share.value(share.index_of(values[:2])).tolist() == [2 / 3, 0.5]
    assert share.index_of(values[2:]).tolist() == [-1, -1]
    assert min(np.diff(share.points)) == pytest.approx(1 / 132) and 1 / 132 > 2 * FLOAT32_TOLERANCE


def test_a_release_finds_a_proportions_fractions_in_float32_data():
    schema = parse_schema({"name": "shares", "version": 1, "n_min": 1000, "columns": [
        {"name": "share", "kind": "continuous", "bounds": [0, 1], "values": "auto"},
        {"name": "group", "kind": "categorical", "categories": ["a", "b"]}]})
    rng = np.random.default_rng(3)
    n = 20_000
    share = rng.random(n)
    spike = rng.random(n)
    share[spike < 0.2] = 2 / 3
    share[(spike >= 0.2) & (spike < 0.3)] = 0.5
    table = pd.DataFrame({"share": share.astype(np.float32).astype(np.float64), "group": rng.choice(["a", "b"], n)})
    synth = Synthesizer(schema, 1.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
    # 4,000 and 2,000 rows against a 4-sigma threshold, sigma about 50 rows: missed with p < 1e-12.
    assert {round(2 / 3, 12), 0.5} <= set(synth.bounds.found_values["share"])
    rows = synth.sample(n, seed=0)
    # Sampling sd < 0.003 at 20,000 rows plus the point cell's noise (about 0.003): 0.03 is beyond 6 sd.
    assert abs(np.isclose(rows["share"], 2 / 3, rtol=0, atol=1e-9).mean() - 0.2) < 0.03
    assert abs((rows["share"] == 0.5).mean() - 0.1) < 0.03


def test_the_threshold_keeps_false_positives_rare_and_never_drops_below_four_sigma():
    expected_false = lambda m: m * NormalDist().cdf(-bounds.selection_z(m))  # noqa: E731
    assert bounds.selection_z(2) == bounds.COARSE_Z and expected_false(1_000) < bounds.FALSE_POSITIVES
    for m in (100_000, 10_000_000):
        assert expected_false(m) == pytest.approx(bounds.FALSE_POSITIVES)


@pytest.mark.parametrize("relation", [RELATION_ADD_REMOVE, RELATION_REPLACE_ONE])
def test_one_row_moves_the_value_counts_by_at_most_one_cell_per_column(relation):
    """The sensitivity argument on the counts themselves: a row adds 1 to one candidate per column (or none)."""
    schema = parse_schema(SCHEMA)
    columns = bounds.values_auto_columns(schema)
    rng = np.random.default_rng(0)
    table = spiky_table(500, rng)
    table.iloc[7] = pd.Series({"limit": 20000, "share": 1.0, "price": 9.9, "small": 3, "group": "a"})

    def dense(t):
        counts = bounds.exact_value_counts(clean_records(t, schema)[0].table, columns)
        out = []
        for spec, (held, count) in zip(columns, counts):
            size = 0 if bounds.value_candidates(spec) is None else bounds.value_candidates(spec).size
            out.append(np.bincount(held, weights=count, minlength=size))
        return np.concatenate(out)

    extreme = pd.DataFrame([{"limit": 50000, "share": 0.0, "price": 100.0, "small": 20, "group": "b"}])
    if relation == RELATION_ADD_REMOVE:
        other = pd.concat([table, extreme], ignore_index=True)
    else:
        other = table.copy()
        other.iloc[7] = extreme.iloc[0]
    shift = float(np.linalg.norm(dense(other) - dense(table)))
    values_only = bounds.estimate_sensitivity(0, len(columns), relation)
    assert shift <= values_only + 1e-12
    # The extreme row, and the spike row it replaces, hold a candidate in each of the three columns that have
    # candidates: the bound is met there.
    assert shift == pytest.approx(math.sqrt((2 if relation == RELATION_REPLACE_ONE else 1) * 3))


def test_a_release_finds_the_spikes_and_the_synthetic_rows_keep_them():
    rng = np.random.default_rng(1)
    table = spiky_table(20_000, rng)
    synth = Synthesizer(parse_schema(SCHEMA), 1.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
    found = synth.bounds.found_values
    # Each spike holds >= 4,000 rows against a threshold near 5.4 sigma, sigma about 50: missed with p < 1e-12.
    assert 20000.0 in found["limit"] and 1.0 in found["share"] and 9.9 in found["price"]
    # About FALSE_POSITIVES empty candidates pass per column; three or more in one column has p < 1e-4 each.
    assert all(len(values) <= 3 for values in found.values()), found
    assert "small" not in found  # nothing to find on a grid of per-value cells
    assert synth.privacy.bounds_noise_multiplier is not None  # the selection is part of the release's cost
    rows = synth.sample(20_000, seed=0)
    # Sampling tolerance: the shares' binomial sd at 20,000 rows is < 0.0035; the noisy point cell adds about
    # 0.003 more (its noise std), so 0.03 is beyond 6 sd.
    assert abs((rows["limit"] == 20000).mean() - (table["limit"] == 20000).mean()) < 0.03
    assert abs((rows["share"] == 1.0).mean() - (table["share"] == 1.0).mean()) < 0.03
    assert abs(np.isclose(rows["price"], 9.9).mean() - np.isclose(table["price"], 9.9).mean()) < 0.03


def test_the_streamed_counts_are_the_whole_tables(tmp_path):
    schema = parse_schema(SCHEMA)
    columns = bounds.values_auto_columns(schema)
    table = spiky_table(5_000, np.random.default_rng(2))
    folder = tmp_path / "parts"
    folder.mkdir()
    table.iloc[:1700].to_parquet(folder / "a.parquet", index=False, row_group_size=300)
    table.iloc[:0].to_parquet(folder / "b.parquet", index=False)
    table.iloc[1700:].to_csv(folder / "c.csv", index=False)
    streamed = partitions.value_counts_source(partitions.list_partitions(str(folder)), schema, columns,
                                              batch_rows=700)
    whole = bounds.exact_value_counts(clean_records(table, schema)[0].table, columns)
    for (held_a, count_a), (held_b, count_b) in zip(streamed, whole):
        np.testing.assert_array_equal(held_a, held_b)
        np.testing.assert_array_equal(count_a, count_b)


# -- decimals: auto ---------------------------------------------------------------------------------------------


def test_the_decimals_a_value_needs():
    values = np.array([3.0, 265.1, 0.25, 1e-7, 6.688942674473659, -12.125, np.nan])
    assert bounds.decimals_needed(values).tolist() == [0, 1, 2, bounds.MAX_DECIMALS + 1, bounds.MAX_DECIMALS + 1,
                                                       3, -1]


def test_the_precision_is_the_fewest_decimals_the_noisy_rows_allow():
    rng = np.random.default_rng(5)
    values = np.round(rng.uniform(0, 500, 20_000), 1)
    values[:50] = rng.uniform(0, 1, 50)  # 0.25% of the rows at full precision (a few odd cells)
    exact = np.bincount(bounds.decimals_needed(values), minlength=bounds.DECIMAL_CELLS).astype(float)
    for _ in range(20):  # seeded noise, sigma 10: the tail's 50 rows plus noise (sd 24) stay below the 200 allowed
        assert bounds.decimals_from_noisy(exact + rng.normal(0, 10, exact.size), 10.0) == 1
    full = np.bincount(bounds.decimals_needed(rng.uniform(0, 1, 5_000)), minlength=bounds.DECIMAL_CELLS)
    assert bounds.decimals_from_noisy(full.astype(float), 30.0) is None


def test_a_release_sets_the_precision_and_rounds_its_output(tmp_path):
    rng = np.random.default_rng(6)
    table = pd.DataFrame({"minutes": np.round(rng.gamma(4.0, 40.0, 5_000), 1), "group": rng.choice(["a", "b"], 5_000)})
    schema = parse_schema({"name": "precision", "version": 1, "n_min": 1000, "columns": [
        {"name": "minutes", "kind": "continuous", "bounds": [0, "auto"], "decimals": "auto"},
        {"name": "group", "kind": "categorical", "categories": ["a", "b"]}]})
    assert schema_to_dict(schema)["columns"][0]["decimals"] == "auto"
    # At eps = 20 the estimate's noise sd is about 1 row against an allowance of 50: a wrong precision has p < 1e-9.
    synth = Synthesizer(schema, 20.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
    assert synth.bounds.found_decimals == {"minutes": 1} and synth.schema.column("minutes").decimals == 1
    rows = synth.sample(2_000, seed=0)
    assert (bounds.decimals_needed(rows["minutes"].to_numpy(dtype=float)) <= 1).all()
    folder = synth.save(tmp_path / "model")
    assert Synthesizer.load(folder).bounds.found_decimals == {"minutes": 1}


def scanned_in_parts(tmp_path, table: pd.DataFrame, schema) -> partitions.Scan:
    """The first pass over ``table`` written as a CSV part and a Parquet part of several row groups."""
    folder = tmp_path / "parts"
    folder.mkdir()
    table.iloc[:1000].to_csv(folder / "a.csv", index=False)
    table.iloc[1000:].to_parquet(folder / "b.parquet", index=False, row_group_size=700)
    return partitions.scan_source(partitions.list_partitions(str(folder)), schema, batch_rows=500)


def test_the_streamed_decimals_counts_are_the_whole_tables(tmp_path):
    schema = parse_schema({"name": "precision", "version": 1, "n_min": 10, "columns": [
        {"name": "minutes", "kind": "continuous", "bounds": "auto", "decimals": "auto"}]})
    table = pd.DataFrame({"minutes": np.round(np.random.default_rng(7).gamma(4.0, 40.0, 3_000), 2)})
    scan = scanned_in_parts(tmp_path, table, schema)
    whole = bounds.exact_decimals(table, bounds.decimals_auto_columns(schema))
    np.testing.assert_array_equal(scan.decimals_counts, whole)


# -- step: auto -------------------------------------------------------------------------------------------------


def test_step_auto_parses_round_trips_and_is_refused_off_integer_columns():
    schema = parse_schema({"name": "steps", "version": 1, "n_min": 10, "columns": [
        {"name": "sensor", "kind": "integer", "bounds": "auto", "step": "auto"}]})
    assert schema.column("sensor").step_auto and schema.column("sensor").step is None
    assert parse_schema(schema_to_dict(schema)) == schema
    with pytest.raises(ValueError, match=r"'reading'.*step: auto belongs to integer columns.*'auto'"):
        parse_schema({"name": "steps", "version": 1, "n_min": 10, "columns": [
            {"name": "reading", "kind": "continuous", "bounds": [0, 1], "step": "auto"}]})


def test_a_value_counts_in_the_cell_of_its_divisor_and_zero_counts_nowhere():
    values = np.array([0.0, 2, -4, 10, 3, np.nan, np.inf, 2.5, 20_000, -188, 436, 1250, 2500, -300, 15])
    cells = bounds.step_cells(values)
    assert cells[[0, 5, 6]].tolist() == [-1, -1, -1]
    # The largest listed step that divides each value (1250 and 2500: 50 and 500, as 250 and 2500 are not listed).
    assert bounds.STEP_CELLS[cells[cells >= 0]].tolist() == [2, 2, 10, 1, 1, 10_000, 2, 2, 50, 500, 100, 5]


def test_the_step_cells_are_closed_under_lcm():
    """So the largest listed step that divides a value is a multiple of every listed step that does."""
    steps = bounds.STEP_CELLS.tolist()
    assert all(np.lcm(a, b) in steps for a in steps for b in steps)
    assert all(steps[-1] % s == 0 for s in steps)


def test_the_step_is_found_where_nearly_every_value_is_a_multiple_and_refused_where_not():
    rng = np.random.default_rng(8)
    cells = len(bounds.STEP_CELLS)

    def histogram(values: np.ndarray) -> np.ndarray:
        found = bounds.step_cells(values)
        return np.bincount(found[found >= 0], minlength=cells).astype(float)

    even = histogram(rng.integers(-94, 218, 40_000) * 2)
    tens_of_thousands = histogram(rng.integers(1, 30, 40_000) * 10_000.0)
    odd_share = rng.integers(-188, 436, 40_000) & ~1
    odd_share[:2_000] |= 1  # 5% odd: above the 2% a step may round off
    mixed = histogram(odd_share)
    sigma = 40.0  # 0.1% of the rows: the noise can neither hide 5% odd nor make an even-only column look mixed
    for _ in range(20):
        assert bounds.step_from_noisy(even + rng.normal(0, sigma, cells), sigma) == 2
        assert bounds.step_from_noisy(tens_of_thousands + rng.normal(0, sigma, cells), sigma) == 10_000
        assert bounds.step_from_noisy(mixed + rng.normal(0, sigma, cells), sigma) is None
    # Too few rows for the noise: no step, even for an even-only column (its noise sd would exceed 2% of the rows).
    assert bounds.step_from_noisy(even / 100, sigma) is None
    # Off-grid noise sd at 1.5% of the rows (shuttle's a9 at eps = 1): an even-only column gets its step in nearly
    # every draw (.98 each), one with 20% odd values in none (its off-grid count stands 10 sd above the threshold).
    sigma = 0.015 * 40_000 / np.sqrt(2)  # two odd cells (1 and 5) are off the grid of 2
    fifth_odd = rng.integers(-188, 436, 40_000) & ~1
    fifth_odd[:8_000] |= 1
    found = [bounds.step_from_noisy(even + rng.normal(0, sigma, cells), sigma) for _ in range(50)]
    assert found.count(2) >= 45
    assert all(bounds.step_from_noisy(histogram(fifth_odd) + rng.normal(0, sigma, cells), sigma) is None
               for _ in range(50))


def test_a_release_finds_the_step_and_its_output_keeps_to_it(tmp_path):
    rng = np.random.default_rng(9)
    table = pd.DataFrame({"sensor": np.round(rng.normal(60, 40, 6_000) / 2).astype(int) * 2,
                          "group": rng.choice(["a", "b"], 6_000)})
    schema = parse_schema({"name": "steps", "version": 1, "n_min": 1000, "columns": [
        {"name": "sensor", "kind": "integer", "bounds": [-200, 300], "step": "auto"},
        {"name": "group", "kind": "categorical", "categories": ["a", "b"]}]})
    # At eps = 20 the estimate's noise sd is about 1 row against an allowance of 60 odd rows: a miss has p < 1e-9.
    synth = Synthesizer(schema, 20.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
    assert synth.bounds.found_steps == {"sensor": 2} and synth.schema.column("sensor").step == 2
    rows = synth.sample(3_000, seed=0)
    assert (rows["sensor"] % 2 == 0).all()
    assert rows["sensor"].nunique() > 60  # every even value, not a few of them
    folder = synth.save(tmp_path / "model")
    assert Synthesizer.load(folder).bounds.found_steps == {"sensor": 2}


def test_a_declared_top_code_off_the_grid_does_not_hide_the_grid():
    rng = np.random.default_rng(11)
    prices = rng.integers(150, 5_000, 6_000) * 100
    prices[:600] = 500_001  # 10% at the top code, as California's house values
    table = pd.DataFrame({"price": prices})

    def found(values: list) -> tuple[Synthesizer, dict]:
        schema = parse_schema({"name": "prices", "version": 1, "n_min": 1000, "columns": [
            {"name": "price", "kind": "integer", "bounds": [0, 500_001], "step": "auto", "values": values}]})
        # At eps = 20 the estimate's noise sd is about 1 row against an allowance of 60 rows off the grid.
        synth = Synthesizer(schema, 20.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
        return synth, synth.bounds.found_steps

    assert found([])[1] == {"price": None}  # the top code is 10% of the rows off every grid
    synth, steps = found([500_001])
    assert steps == {"price": 100}
    rows = synth.sample(3_000, seed=0)["price"]
    assert ((rows % 100 == 0) | (rows == 500_001)).all()
    assert 0.07 < (rows == 500_001).mean() < 0.13


def test_the_streamed_step_counts_are_the_whole_tables(tmp_path):
    schema = parse_schema({"name": "steps", "version": 1, "n_min": 10, "columns": [
        {"name": "sensor", "kind": "integer", "bounds": "auto", "step": "auto"}]})
    table = pd.DataFrame({"sensor": np.random.default_rng(10).integers(-50, 500, 3_000) * 5})
    scan = scanned_in_parts(tmp_path, table, schema)
    whole = bounds.exact_steps(table, bounds.steps_auto_columns(schema))
    np.testing.assert_array_equal(scan.steps_counts, whole)
    assert whole.sum() == (table["sensor"] != 0).sum()
