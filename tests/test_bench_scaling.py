"""The scaling grid's bookkeeping: one row per cell (n, d, method, epsilon) and the two time ratios it reports."""

from __future__ import annotations

import pandas as pd

from bench import scaling


def test_the_scaling_grid_keeps_one_row_per_epsilon_and_reports_both_ratios(tmp_path, monkeypatch):
    """A matched-precision cell (400,000 rows at eps / 32) sits beside the same n at eps; the report gives the ratio
    at fixed eps and the one at fixed n * eps, from the right rows; a rerun of a cell replaces only that cell."""
    def cell(n, eps, wall):
        return {"n": n, "d": 24, "method": "splice", "epsilon": eps, "status": "ok", "wall_s": wall,
                "peak_rss_mb": 100.0, "t_fit": wall / 2}

    grid = pd.DataFrame()
    for row in (cell(12_500, 1.0, 20.0), cell(400_000, 1.0, 70.0), cell(400_000, 1 / 32, 30.0),
                cell(400_000, 1.0, 69.0)):
        grid = scaling.with_cell(grid, row)
    assert len(grid) == 3 and grid.loc[grid["epsilon"] == 1.0, "wall_s"].max() == 69.0
    monkeypatch.setattr(scaling, "SCALING_MD", tmp_path / "scaling.md")
    scaling.write_md(grid)
    text = (tmp_path / "scaling.md").read_text()
    assert "at ε = 1: time(n=400,000, ε = 1) / time(n=12,500, ε = 1) (32× rows): wall 3.45×, fit 3.45×" in text
    assert "at n·ε = 12,500: time(n=400,000, ε = 0.03125) / time(n=12,500, ε = 1) (32× rows): wall 1.50×" in text
