"""bench.speed's table (issue 69) from a frame of runs: no data, nothing run."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.speed import fit_ratios, parse_rows, speed_table


def _runs() -> pd.DataFrame:
    rows = []
    for eps, (ours, mst, fit) in {1.0: (20.0, 100.0, 10.0), 10.0: (40.0, 120.0, 15.0)}.items():
        for seed, jitter in ((0, 0.0), (1, 2.0)):
            rows.append({"dataset": "toy", "epsilon": eps, "seed": seed, "method": "splice_add_remove",
                         "status": "ok", "cpu_s": ours + jitter, "wall_s": ours + 1, "peak_rss_mb": 700.0,
                         "tvd2": 0.04, "tvd3": 0.08, "tstr": 0.9, "fit_cpu_s": fit + jitter, "fit_steps": 300,
                         "tilt_iterations": 15})  # fmt: skip
            rows.append({"dataset": "toy", "epsilon": eps, "seed": seed, "method": "mst", "status": "ok",
                         "cpu_s": mst + jitter, "wall_s": mst + 5, "peak_rss_mb": 2500.0, "tvd2": 0.05,
                         "tvd3": 0.1, "tstr": 0.8})  # fmt: skip
    rows.append({"dataset": "toy", "epsilon": 0.1, "seed": 0, "method": "mst", "status": "error"})
    return pd.DataFrame(rows)


def test_rows_are_table_colon_epsilon():
    assert parse_rows("adult:1, fars:0.1,") == [("adult", 1.0), ("fars", 0.1)]
    with pytest.raises(ValueError):
        parse_rows("adult")


def test_the_table_has_medians_over_seeds_and_the_ratio_to_mst():
    lines = speed_table(_runs())
    assert lines[0].startswith("| table, ε (add-remove) | seeds | SPLICE CPU s | MST CPU s | MST / SPLICE |")
    assert "SDM" not in lines[0]  # no SDMetrics column where none ran
    row = lines[2].split(" | ")
    assert row[0] == "| toy, 1" and row[2:5] == ["21.0", "101.0", "4.8×"]
    assert row[6] == "700 / 2,500" and row[-3] == "0.040 / 0.050"
    assert not any(line.startswith("| toy, 0.1") for line in lines)  # a failed run alone makes no row
    assert "missed at toy ε=1, toy ε=10" in lines[-1]


def test_the_fit_ratio_is_epsilon_ten_over_one():
    low, high, ratio = fit_ratios(_runs())["toy"]
    assert (low, high) == (11.0, 16.0) and ratio == pytest.approx(16 / 11)
    assert "- toy: 11.0 → 16.0 = 1.45×" in speed_table(_runs())
