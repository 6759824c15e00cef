"""The scaling grid's bookkeeping: one row per cell (n, d, method, epsilon) and the two time ratios it reports."""

from __future__ import annotations

import pandas as pd
import pytest

from bench import scaling
from bench.common import DELTA
from splice_assets.private import measuring
from splice_assets.schema import parse_schema


def test_the_scaling_grid_keeps_one_row_per_epsilon_and_reports_both_ratios(tmp_path, monkeypatch):
    """A matched-precision cell (400,000 rows at the matched epsilon) sits beside the same n at eps = 1; the report
    gives the ratio at fixed eps and the one at matched noise, from the right rows; a rerun replaces only its cell."""
    def cell(n, eps, wall):
        return {"n": n, "d": 24, "method": "splice", "epsilon": eps, "status": "ok", "wall_s": wall,
                "peak_rss_mb": 100.0, "t_fit": wall / 2}

    grid = pd.DataFrame()
    for row in (
        cell(12_500, 1.0, 20.0),
        cell(400_000, 1.0, 70.0),
        cell(400_000, scaling.equivalent_epsilon(1.0, 12_500, 400_000), 30.0),
        cell(400_000, 1.0, 69.0),
    ):
        grid = scaling.with_cell(grid, row)
    assert len(grid) == 3 and grid.loc[grid["epsilon"] == 1.0, "wall_s"].max() == 69.0
    monkeypatch.setattr(scaling, "SCALING_MD", tmp_path / "scaling.md")
    scaling.write_md(grid)
    text = (tmp_path / "scaling.md").read_text()
    assert "at ε = 1: time(n=400,000, ε = 1) / time(n=12,500, ε = 1) (32× rows): wall 3.45×, fit 3.45×" in text
    assert ("at the noise of 12,500 rows at ε = 1: time(n=400,000, ε = 0.0271602) / time(n=12,500, ε = 1) (32× rows): "
            "wall 1.50×") in text


def test_the_equivalent_epsilon_gives_n_rows_the_noise_of_the_smallest_cell():
    """The pipeline's own calibration: 400,000 rows at the matched epsilon get the same noise std per pair frequency
    as 12,500 rows at eps = 1 (to 1e-6), and 1 / 32 would give them 13% less (the multiplier is not linear in
    1 / epsilon at delta = 1e-9)."""
    schema = parse_schema(scaling.schema_dict(6))

    def pair_std(n, eps):
        plan, calibration = measuring.make_plan(schema, n, eps, DELTA)
        return calibration.sigma / plan.pair_weight

    assert scaling.equivalent_epsilon(1.0, 12_500, 12_500) == pytest.approx(1.0, rel=1e-9)
    matched = scaling.equivalent_epsilon(1.0, 12_500, 400_000)
    assert scaling.equivalent_epsilon(matched, 400_000, 12_500) == pytest.approx(1.0, rel=1e-6)
    assert pair_std(400_000, matched) == pytest.approx(pair_std(12_500, 1.0), rel=1e-6)
    assert pair_std(400_000, 1 / 32) < 0.9 * pair_std(12_500, 1.0)
