"""The bench's peers at the replace-one-equivalent epsilon (bench/peer_runner.py), with a stand-in for smartnoise's
zCDP -> (eps, delta) conversion (the real one lives in the peers' virtualenv)."""

from __future__ import annotations

import math

import pytest

from bench.peer_runner import REPLACE_ONE_FACTOR, replace_one_epsilon


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The rho whose classic bound eps = rho + 2 sqrt(rho ln(1/delta)) gives ``epsilon`` (monotone, as cdp_rho is)."""
    log_term = math.log(1.0 / delta)
    return (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2


@pytest.mark.parametrize("method", ["aim", "mst"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0, 10.0])
def test_the_peer_spends_its_replace_one_share_of_rho_and_no_more(method, epsilon):
    eps_add_remove, rho = replace_one_epsilon(method, epsilon, 1e-9, zcdp_rho)
    target = zcdp_rho(epsilon, 1e-9) / REPLACE_ONE_FACTOR[method]
    assert rho == zcdp_rho(eps_add_remove, 1e-9)
    assert rho <= target  # never more than the share: the peer is (eps, delta)-DP under replace-one
    assert rho == pytest.approx(target, rel=1e-9)  # and not needlessly less
    assert 0 < eps_add_remove < epsilon


def test_the_scaling_grid_keeps_one_row_per_epsilon_and_reports_both_ratios(tmp_path, monkeypatch):
    """A matched-precision cell (400,000 rows at eps / 32) sits beside the same n at eps; the report gives the ratio
    at fixed eps and the one at fixed n * eps, from the right rows; a rerun of a cell replaces only that cell."""
    import pandas as pd

    from bench import scaling

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
