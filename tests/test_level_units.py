"""The weight of 1-way tables of many cells (``MeasurementSettings.level_units``, on by default, decisions 0064 to
0066): with it a coarse table of s cells counts as round((s / 16)^(2/3)) tables, at least one, and the 1-way share
keeps its value: the other 1-way tables pay for the extra units (0066). So a category column of 40 levels gets two
units and 1/sqrt(2) of a one-unit table's noise, every other 1-way table a little more noise, and the moments and
pairs keep theirs. The release path's neighbour test
(``test_release_path_neighbours``, whose schema has such a column) checks the same weights and shares on the vector
the sampler is handed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from splice_assets import MeasurementSettings
from splice_assets.measurement import Measurement, level_units, pooled_row_count
from splice_assets.private import measuring
from splice_assets.private.encoding import encode
from splice_assets.schema import parse_schema

REGIONS = [f"r{i:02d}" for i in range(40)]
SCHEMA = parse_schema({
    "name": "toy_level_units", "version": 1, "n_min": 100,
    "columns": [
        {"name": "amount", "kind": "continuous", "bounds": [0, 1000]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue"]},
        {"name": "region", "kind": "categorical", "categories": REGIONS},
    ],
})


def table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame({"amount": rng.gamma(2.0, 80.0, n).clip(0, 1000).round(2),
                         "colour": rng.choice(["red", "green", "blue"], n), "region": rng.choice(REGIONS, n)})


def test_the_units_grow_with_the_two_thirds_power_of_the_cells():
    assert level_units((2, 10, 16, 29), 16) == (1, 1, 1, 1)
    assert level_units((30, 41, 52, 63), 16) == (2, 2, 2, 2)
    assert level_units((64, 100, 105), 16) == (3, 3, 4)
    assert level_units((), 16) == ()


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_a_table_of_many_levels_counts_twice_and_the_other_tables_pay(relation):
    base, cal1 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, level_units=False)
    heavy, cal2 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, level_units=True)
    assert base.marginal_sizes == heavy.marginal_sizes == (16, 3, 40)
    assert heavy.marginal_units == (1, 1, 2) and base.marginal_units == ()
    assert heavy.coarse_units == 4 and base.coarse_units == 3
    # the 1-way share is the same; its units are one more, so a unit's weight falls by sqrt(units / (units + 1))
    assert heavy.one_way_share == pytest.approx(base.one_way_share)
    units = measuring.one_way_units(base.coarse_units, base.fine, base.grid_weight, base.interval_weight)
    assert cal2.marginal_noise_std() == pytest.approx(cal1.marginal_noise_std() * math.sqrt((units + 1) / units),
                                                      rel=1e-5)
    # the moments and the pairs keep their noise; the region's cells get sqrt(2) times a unit's weight
    assert cal2.pair_noise_std() == pytest.approx(cal1.pair_noise_std(), rel=1e-5)
    assert cal2.noise_std_per_order()[0] == pytest.approx(cal1.noise_std_per_order()[0], rel=1e-5)
    weights = heavy.coarse_table_weights()
    assert weights[:19] == pytest.approx(np.full(19, heavy.marginal_weight))
    assert weights[19:] == pytest.approx(np.full(40, math.sqrt(2) * heavy.marginal_weight))
    assert heavy.public_params()["marginal_units"] == [1, 1, 2] and "marginal_units" not in base.public_params()


def test_the_cells_of_a_table_of_many_levels_carry_the_stated_noise():
    """Statistical (the noise comes from OS entropy, so no seed): 60 measurements of one table. The region's cells
    deviate from the exact frequencies with the std ``table_noise_stds`` states, 1/sqrt(2) of the colour's. N
    deviations estimate a std to a relative standard error of 1/sqrt(2N) (60 x 40: 1.4%, 60 x 19: 2.1%); the
    tolerance is 5 of them."""
    rows = table(np.random.default_rng(3), 2000)
    plan, calibration = measuring.make_plan(SCHEMA, len(rows), 1.0, 1e-6, relation="replace-one", level_units=True)
    exact = measuring.exact_statistics(encode(rows, SCHEMA), plan, measuring.layout_for(SCHEMA))
    unit, region = [], []
    for _ in range(60):
        measured = measuring.measure_exact(exact, plan, calibration)
        deviation = measured.noisy_marginals - exact.marginals
        unit.append(deviation[:19])
        region.append(deviation[19:])
    stds = measured.table_noise_stds()
    assert stds == pytest.approx(measured.marginal_noise_std() * np.array([1.0, 1.0, 1 / math.sqrt(2)]))
    assert measured.marginal_cell_noise_stds() == pytest.approx(np.repeat(stds, (16, 3, 40)))
    for deviations, expected in ((unit, stds[0]), (region, stds[2])):
        sample = np.concatenate(deviations)
        assert np.std(sample) == pytest.approx(expected, rel=5.0 / math.sqrt(2 * sample.size))


def test_the_units_are_saved_and_an_older_measurement_reads_as_one_each(tmp_path):
    rows = table(np.random.default_rng(4), 500)
    plan, calibration = measuring.make_plan(SCHEMA, len(rows), 1.0, 1e-6, relation="replace-one", level_units=True)
    measured = measuring.measure(encode(rows, SCHEMA), SCHEMA, plan, calibration)
    assert measured.marginal_units == (1, 1, 2)
    measured.save(tmp_path / "m")
    assert Measurement.load(tmp_path / "m").table_noise_stds() == pytest.approx(measured.table_noise_stds())
    meta = (tmp_path / "m.json").read_text()
    (tmp_path / "m.json").write_text(meta.replace('"marginal_units": [\n    1,\n    1,\n    2\n  ],', ""))
    older = Measurement.load(tmp_path / "m")
    assert older.marginal_units == () and older.table_noise_stds() == pytest.approx([measured.marginal_noise_std()] * 3)


def test_the_row_count_pools_each_table_at_its_own_noise():
    """Two tables of equal totals but noise 1 and 1/sqrt(2) per cell: the second weighs twice the first."""
    n = pooled_row_count(1000.0, 1e9, np.array([60.0, 40.0, 30.0, 100.0]), (2, 2), 1.0, np.zeros(0), (), 1.0,
                         marginal_units=(1, 2))
    assert n == pytest.approx((100 / 2 + 130 * 2 / 2) / (1 / 2 + 2 / 2))


def test_level_units_are_on_by_default_and_off_on_request():
    plan, _ = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6)
    assert MeasurementSettings().level_units is True and plan.marginal_units == (1, 1, 2)
    assert plan.coarse_units == len(plan.marginal_sizes) + 1
    plain, _ = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, level_units=False)
    assert plain.marginal_units == () and plain.coarse_units == len(plain.marginal_sizes)


def test_level_units_is_validated():
    with pytest.raises(ValueError, match="level_units must be true or false, got 'yes'"):
        MeasurementSettings(level_units="yes")  # type: ignore[arg-type]
