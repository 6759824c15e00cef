"""The weight of per-value fine tables inside the 1-way share (``MeasurementSettings.grid_weight``): the fine table
of a column with one cell per grid value counts as r 1-way tables, so Delta keeps its shares, its cells carry
1/sqrt(r) of a coarse cell's noise, interval tables keep a coarse cell's, and the coarse cells carry
sqrt((T_c + r T_v + T_i) / (T_c + T_v + T_i)) times their noise at r = 1. The release path's neighbour test
(``test_release_path_neighbours``) checks the same weights on the vector the sampler is handed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from splice_assets import MeasurementSettings
from splice_assets.measurement import Measurement
from splice_assets.private import measuring
from splice_assets.private.encoding import encode
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
def test_a_per_value_table_counts_as_grid_weight_tables_and_delta_keeps_its_shares(relation):
    base, cal1 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, grid_weight=1)
    heavy, cal4 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, grid_weight=4)
    age, amount = base.fine
    assert age.per_value and not amount.per_value  # 100 integers, one cell each; 256 intervals
    coarse = len(base.marginal_sizes)
    assert coarse == 3
    bare = [c.sensitivity / (1.0 + c.slack) for c in (cal1, cal4)]
    assert bare[0] == pytest.approx(bare[1], rel=1e-12)
    # sigma carries the float slack (about 1e-6 here)
    ratio = cal4.marginal_noise_std() / cal1.marginal_noise_std()
    assert ratio == pytest.approx(math.sqrt((coarse + 4 + 1) / (coarse + 1 + 1)), rel=1e-5)
    assert heavy.fine_table_weight(age) == pytest.approx(2.0 * heavy.marginal_weight)
    assert heavy.fine_table_weight(amount) == pytest.approx(heavy.marginal_weight)
    assert cal4.pair_noise_std() == pytest.approx(cal1.pair_noise_std(), rel=1e-5)
    assert heavy.public_params()["grid_weight"] == 4 and "grid_weight" not in base.public_params()


def test_the_fine_cells_carry_the_stated_noise():
    """Statistical (the noise comes from OS entropy, so no seed): 40 measurements of one table at grid_weight 4.
    The per-value cells' deviations from the exact frequencies have the std ``fine_noise_std(True)`` states, the
    interval cells and the coarse cells twice it. 40 x 100 deviations estimate a std to about 1.1%, 40 x 256 to
    0.7%; the tolerance is 5%."""
    rows = table(np.random.default_rng(3), 2000)
    plan, calibration = measuring.make_plan(SCHEMA, len(rows), 1.0, 1e-6, relation="replace-one", grid_weight=4)
    exact = measuring.exact_statistics(encode(rows, SCHEMA), plan, measuring.layout_for(SCHEMA))
    values, intervals, coarse = [], [], []
    for _ in range(40):
        measured = measuring.measure_exact(exact, plan, calibration)
        deviation = measured.noisy_fine - exact.fine
        values.append(deviation[:100])
        intervals.append(deviation[100:])
        coarse.append(measured.noisy_marginals - exact.marginals)
        assert measured.grid_weight == 4
    std = measured.fine_noise_std(per_value=True)
    assert std == pytest.approx(measured.marginal_noise_std() / 2.0)
    assert measured.fine_noise_std(per_value=False) == measured.marginal_noise_std()
    assert np.std(values) == pytest.approx(std, rel=0.05)
    assert np.std(intervals) == pytest.approx(2.0 * std, rel=0.05)
    assert np.std(coarse) == pytest.approx(2.0 * std, rel=0.05)


def test_the_grid_weight_is_saved_and_an_older_measurement_reads_as_one(tmp_path):
    rows = table(np.random.default_rng(4), 500)
    plan, calibration = measuring.make_plan(SCHEMA, len(rows), 1.0, 1e-6, relation="replace-one", grid_weight=3)
    measured = measuring.measure(encode(rows, SCHEMA), SCHEMA, plan, calibration)
    measured.save(tmp_path / "m")
    assert Measurement.load(tmp_path / "m").fine_noise_std(True) == pytest.approx(measured.fine_noise_std(True))
    meta = (tmp_path / "m.json").read_text().replace('"grid_weight": 3,', "")
    (tmp_path / "m.json").write_text(meta)
    assert Measurement.load(tmp_path / "m").grid_weight == 1


def test_grid_weight_setting_is_validated():
    for bad in (0, 1.5, 65):
        with pytest.raises(ValueError, match=rf"grid_weight must be an integer in \[1, 64\], got {bad!r}"):
            MeasurementSettings(grid_weight=bad)
