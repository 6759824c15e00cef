"""Values written from float32 or binary float64 (issue 71): ``decimals: auto`` and ``values: auto`` read a value
within its storage precision (``kinds.scales.stands_for``), so 0.2 written from float32 (0.2000000029802322) needs 1
decimal and is the grid candidate 0.2; a continuous column at 0 decimals is written to CSV as whole numbers.

Statistical assertions state their tolerance; noise is seeded through the bench's hook (``bench.common.seeded_noise``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.common import seeded_noise
from splice_assets.api import Synthesizer
from splice_assets.kinds.scales import at_point, float32_rendered, stands_for
from splice_assets.measurement import RELATION_ADD_REMOVE
from splice_assets.private import bounds
from splice_assets.release.bundle import write_csv_escaped
from splice_assets.schema import parse_schema

FIFTH = float("0.2000000029802322")  # 0.2 as float32, written with float64 digits (the rendering)
TWO_THIRDS = float("0.6666666865348816")  # 2/3 likewise


def test_a_float32_rendering_needs_the_decimals_of_its_decimal():
    single = np.array([0.2, 0.35, 24.0, 1234.56, 0.123, 2 / 3], dtype=np.float32).astype(np.float64)
    assert float32_rendered(single).all()
    assert bounds.decimals_needed(single).tolist() == [1, 2, 0, 2, 3, bounds.MAX_DECIMALS + 1]
    assert bounds.decimals_needed(np.array([FIFTH, TWO_THIRDS])).tolist() == [1, bounds.MAX_DECIMALS + 1]
    # The next float32 above 0.2 is not 0.2: it needs all its digits.
    assert bounds.decimals_needed(np.array([np.nextafter(np.float32(0.2), np.float32(1))], dtype=np.float64)
                                  ).tolist() == [bounds.MAX_DECIMALS + 1]


def test_binary_float64_renderings_and_float64_values_read_as_before():
    values = np.array([265.10000000000002, 0.1 + 0.2, 1.1 * 3, 6.688942674473659, 1e-7, 0.123456789, np.nan])
    assert not float32_rendered(values[:6]).any()
    assert bounds.decimals_needed(values).tolist() == [1, 1, 1, bounds.MAX_DECIMALS + 1, bounds.MAX_DECIMALS + 1,
                                                       bounds.MAX_DECIMALS + 1, -1]


def test_a_decimal_grid_candidate_matches_its_float32_rendering():
    spec = parse_schema({"name": "t", "version": 1, "n_min": 10, "columns": [
        {"name": "x", "kind": "continuous", "bounds": [0, 10], "decimals": 1, "values": "auto"}]}).columns[0]
    grid = bounds.value_candidates(spec)
    assert grid is not None and grid.step == pytest.approx(0.1) and grid.size == 101
    values = np.array([FIFTH, 0.2, np.float32(7.3), np.nextafter(np.float32(0.2), np.float32(1)), 0.25, np.nan])
    assert grid.index_of(values).tolist() == [2, 2, 73, -1, -1, -1]
    assert stands_for(np.array([FIFTH]), np.array([0.2])).all()
    # A decimal grid has no fine cells of its own: it is offered however few its points are (11 in [0, 1]).
    small = parse_schema({"name": "t", "version": 1, "n_min": 10, "columns": [
        {"name": "x", "kind": "continuous", "bounds": [0, 1], "decimals": 1, "values": "auto"}]}).columns[0]
    small_grid = bounds.value_candidates(small)
    assert small_grid is not None and small_grid.size == 11


def float32_table(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """float32 values written with float64 digits: ``amount`` in [0, 10] with 2 decimals, 25% of it at 0.2; ``share``
    in [0, 1] with 2 decimals, 25% of it at 2/3; ``tenth`` in [0, 1] with 1 decimal, 25% of it at 0.2."""
    def single(x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32).astype(np.float64)

    amount = single(np.round(rng.uniform(0.0, 10.0, n), 2))
    amount[rng.random(n) < 0.25] = FIFTH
    share = single(np.round(rng.uniform(0.0, 1.0, n), 2))
    share[rng.random(n) < 0.25] = TWO_THIRDS
    tenth = single(np.round(rng.uniform(0.0, 1.0, n), 1))
    tenth[rng.random(n) < 0.25] = FIFTH
    return pd.DataFrame({"amount": amount, "share": share, "tenth": tenth, "group": rng.choice(["a", "b"], n)})


def test_a_float32_point_mass_survives_values_and_decimals_auto_at_epsilon_1():
    """The issue's case: 0.2 written from float32 held by a quarter of the rows. Before, ``decimals: auto`` read
    'more than 6' and ``amount`` was offered only its bounds and 0: the mass came out at 0%. Tolerance: the share at
    each point within 5 points of the data's (its sampling sd on 4,000 rows is 0.7 points)."""
    table = float32_table(6_000, np.random.default_rng(3))
    auto = {"kind": "continuous", "decimals": "auto", "values": "auto"}
    schema = parse_schema({"name": "float32", "version": 1, "n_min": 1000, "columns": [
        {"name": "amount", "bounds": [0, 10], **auto}, {"name": "share", "bounds": [0, 1], **auto},
        {"name": "tenth", "bounds": [0, 1], **auto},
        {"name": "group", "kind": "categorical", "categories": ["a", "b"]}]})
    with seeded_noise(11):
        synth = Synthesizer(schema, 1.0, 1e-9, RELATION_ADD_REMOVE).fit(table, ledger=None)
    found = synth.bounds
    assert found.found_decimals == {"amount": 2, "share": None, "tenth": 1}
    assert 0.2 in found.found_values["amount"] and 0.2 in found.found_values["tenth"]
    assert any(abs(v - 2 / 3) < 1e-9 for v in found.found_values["share"])  # its fractions: 2/3 is a candidate
    rows = synth.sample(4_000, seed=0)
    for name, point in (("amount", 0.2), ("share", 2 / 3), ("tenth", 0.2)):
        real = float(at_point(table[name].to_numpy(), point, 0.0, 1.0).mean())
        synthetic = float(at_point(rows[name].to_numpy(dtype=float), point, 0.0, 1.0).mean())
        assert real >= 0.22  # a quarter (sd 0.6 points), and the rows that draw the value anyway
        assert synthetic == pytest.approx(real, abs=0.05), (name, real, synthetic)
    # Written at the column's decimals (the choice: ``decimals: auto`` rounds to d decimals, not to float32; a
    # column that should read as float32 declares ``float32: true``): 0.2, which stands for 0.2000000029802322.
    assert (bounds.decimals_needed(rows["amount"].to_numpy(dtype=float)) <= 2).all()
    assert stands_for(np.array([FIFTH]), rows["amount"].to_numpy(dtype=float)[
        np.isclose(rows["amount"].to_numpy(dtype=float), 0.2)][:1]).all()


def test_a_column_at_zero_decimals_is_written_as_whole_numbers(tmp_path):
    schema = parse_schema({"name": "whole", "version": 1, "n_min": 10, "columns": [
        {"name": "age", "kind": "continuous", "bounds": [0, 120], "decimals": 0, "nullable": True},
        {"name": "price", "kind": "continuous", "bounds": [0, 100], "decimals": 1},
        {"name": "count", "kind": "integer", "bounds": [0, 10]}]})
    table = pd.DataFrame({"age": [24.0, np.nan, 0.0, 120.0], "price": [2.0, 3.5, 0.0, 100.0],
                          "count": np.array([1, 2, 3, 4], dtype=np.int64)})
    path = tmp_path / "out.csv"
    write_csv_escaped(table, path, schema)
    lines = path.read_text().splitlines()
    assert lines == ["age,price,count", "24,2.0,1", ",3.5,2", "0,0.0,3", "120,100.0,4"]
    assert table["age"].dtype == np.float64  # only the text changes
    write_csv_escaped(table, path)  # without a schema: as before
    assert path.read_text().splitlines()[1] == "24.0,2.0,1"
