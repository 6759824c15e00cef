"""The weight of fine tables (``MeasurementSettings.grid_weight``, ``interval_weight``): the fine table of a column
with one cell per grid value counts as r 1-way tables, one of intervals as r', and the 1-way share grows by the
extra units, out of the moments' share. So every other table keeps its noise, a fine table's cells carry 1/sqrt(r)
of it, and the moments more. The release path's neighbour test (``test_release_path_neighbours``) checks the same
weights and shares on the vector the sampler is handed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from splice_assets import MeasurementSettings
from splice_assets.measurement import Measurement
from splice_assets.private import measuring
from splice_assets.private.encoding import encode
from splice_assets.private.mechanism import DEFAULT_COUNT_SHARE, DEFAULT_MARGINAL_SHARE
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "toy_grid_weight", "version": 1, "n_min": 100,
    "columns": [
        {"name": "age", "kind": "integer", "bounds": [0, 99]},
        {"name": "amount", "kind": "continuous", "bounds": [0, 1000]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue"]},
    ],
})


def table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame({"age": rng.integers(0, 100, n), "amount": rng.gamma(2.0, 80.0, n).clip(0, 1000).round(2),
                         "colour": rng.choice(["red", "green", "blue"], n)})


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_a_per_value_table_counts_as_grid_weight_tables_and_the_moments_pay(relation):
    base, cal1 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, grid_weight=1, interval_weight=1)
    heavy, cal4 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, grid_weight=4, interval_weight=1)
    age, amount = base.fine
    assert age.per_value and not amount.per_value  # 100 integers, one cell each; 256 intervals
    coarse = len(base.marginal_sizes)
    assert coarse == 3
    # 3 coarse + 1 interval + 4 units for the per-value table, against 5 tables at one unit each
    assert heavy.one_way_share == pytest.approx(DEFAULT_MARGINAL_SHARE * 8 / 5)
    assert base.one_way_share == DEFAULT_MARGINAL_SHARE
    # sigma carries the float slack (about 1e-6 here); every table at one unit and every pair keeps its noise
    assert cal4.marginal_noise_std() == pytest.approx(cal1.marginal_noise_std(), rel=1e-5)
    assert cal4.pair_noise_std() == pytest.approx(cal1.pair_noise_std(), rel=1e-5)
    assert heavy.fine_table_weight(age) == pytest.approx(2.0 * heavy.marginal_weight)
    assert heavy.fine_table_weight(amount) == pytest.approx(heavy.marginal_weight)
    # the moments' share falls from 1 - s1 - s2 (- count) to 1 - 1.6 s1 - s2 (- count): their noise rises
    count = DEFAULT_COUNT_SHARE if relation == "add-remove" else 0.0
    rest = [1.0 - share - base.pair_share - count for share in (base.one_way_share, heavy.one_way_share)]
    moments = cal4.noise_std_per_order()[0] / cal1.noise_std_per_order()[0]
    assert moments == pytest.approx(math.sqrt(rest[0] / rest[1]), rel=1e-5)
    assert heavy.public_params()["grid_weight"] == 4 and "grid_weight" not in base.public_params()


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_an_interval_table_counts_as_interval_weight_tables_and_the_moments_pay(relation):
    base, cal1 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, grid_weight=4, interval_weight=1)
    heavy, cal2 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, grid_weight=4, interval_weight=2)
    age, amount = heavy.fine
    # 3 coarse + 4 units for the per-value table + 2 for the intervals, against 5 tables at one unit each
    assert heavy.one_way_share == pytest.approx(DEFAULT_MARGINAL_SHARE * 9 / 5)
    assert cal2.marginal_noise_std() == pytest.approx(cal1.marginal_noise_std(), rel=1e-5)
    assert cal2.pair_noise_std() == pytest.approx(cal1.pair_noise_std(), rel=1e-5)
    assert heavy.fine_table_weight(amount) == pytest.approx(math.sqrt(2) * heavy.marginal_weight)
    assert heavy.fine_table_weight(age) == pytest.approx(2.0 * heavy.marginal_weight)
    count = DEFAULT_COUNT_SHARE if relation == "add-remove" else 0.0
    rest = [1.0 - share - base.pair_share - count for share in (base.one_way_share, heavy.one_way_share)]
    moments = cal2.noise_std_per_order()[0] / cal1.noise_std_per_order()[0]
    assert moments == pytest.approx(math.sqrt(rest[0] / rest[1]), rel=1e-5)
    assert heavy.public_params()["interval_weight"] == 2


def test_the_fine_cells_carry_the_stated_noise():
    """Statistical (the noise comes from OS entropy, so no seed): 40 measurements of one table at grid_weight 4 and
    interval_weight 2. The per-value cells' deviations from the exact frequencies have the std
    ``fine_noise_std(True)`` states, the interval cells sqrt(2) times it and the coarse cells twice it. N deviations
    estimate a std to a relative standard error of 1/sqrt(2N) (40 x 100: 1.1%, 40 x 256: 0.7%); the tolerance is 5
    of them (a flat 5% was 2.6 of them for the 35 coarse cells: it failed about once in a hundred runs)."""
    rows = table(np.random.default_rng(3), 2000)
    plan, calibration = measuring.make_plan(SCHEMA, len(rows), 1.0, 1e-6, relation="replace-one", grid_weight=4,
                                            interval_weight=2)
    exact = measuring.exact_statistics(encode(rows, SCHEMA), plan, measuring.layout_for(SCHEMA))
    values, intervals, coarse = [], [], []
    for _ in range(40):
        measured = measuring.measure_exact(exact, plan, calibration)
        deviation = measured.noisy_fine - exact.fine
        values.append(deviation[:100])
        intervals.append(deviation[100:])
        coarse.append(measured.noisy_marginals - exact.marginals)
        assert (measured.grid_weight, measured.interval_weight) == (4, 2)
    std = measured.fine_noise_std(per_value=True)
    assert std == pytest.approx(measured.marginal_noise_std() / 2.0)
    assert measured.fine_noise_std(per_value=False) == pytest.approx(math.sqrt(2) * std)
    for deviations, expected in ((values, std), (intervals, math.sqrt(2) * std), (coarse, 2.0 * std)):
        sample = np.concatenate(deviations)
        assert np.std(sample) == pytest.approx(expected, rel=5.0 / math.sqrt(2 * sample.size))


def test_the_fine_weights_are_saved_and_an_older_measurement_reads_as_one(tmp_path):
    rows = table(np.random.default_rng(4), 500)
    plan, calibration = measuring.make_plan(SCHEMA, len(rows), 1.0, 1e-6, relation="replace-one", grid_weight=3,
                                            interval_weight=2)
    measured = measuring.measure(encode(rows, SCHEMA), SCHEMA, plan, calibration)
    measured.save(tmp_path / "m")
    loaded = Measurement.load(tmp_path / "m")
    for per_value in (True, False):
        assert loaded.fine_noise_std(per_value) == pytest.approx(measured.fine_noise_std(per_value))
    meta = (tmp_path / "m.json").read_text().replace('"grid_weight": 3,', "").replace('"interval_weight": 2,', "")
    (tmp_path / "m.json").write_text(meta)
    assert (Measurement.load(tmp_path / "m").grid_weight, Measurement.load(tmp_path / "m").interval_weight) == (1, 1)


def test_the_fine_weights_are_validated():
    for bad in (0, 1.5, 65):
        for name in ("grid_weight", "interval_weight"):
            with pytest.raises(ValueError, match=rf"{name} must be an integer in \[1, 64\], got {bad!r}"):
                MeasurementSettings(**{name: bad})
