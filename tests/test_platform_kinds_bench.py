"""The taxis bench's metrics and references (bench/platform_kinds.py) on tiny in-memory tables whose answers are
known; no shared data needed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.platform_kinds import (
    bootstrap_rows,
    duration_metrics,
    gaussian_copula,
    independent_columns,
    markdown,
    platform_metrics,
    real_reference,
    rule_violations,
    summary,
    time_metrics,
    zone_metrics,
)


def trips(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Trips in March 2019 as the CSV holds them (text timestamps), durations 60..3600 s, tip < fare."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2019-03-01") + pd.to_timedelta(rng.integers(0, 31 * 86_400, n), unit="s")
    duration = pd.to_timedelta(rng.integers(60, 3_600, n), unit="s")
    fare = rng.uniform(3, 50, n).round(2)
    tip = (fare * rng.uniform(0, 0.3, n)).round(2)
    tolls = np.where(rng.uniform(size=n) < 0.1, 5.76, 0.0)
    zones = np.array([f"zone {i}" for i in range(30)], dtype=object)
    return pd.DataFrame({
        "pickup": start.strftime("%Y-%m-%d %H:%M:%S"), "dropoff": (start + duration).strftime("%Y-%m-%d %H:%M:%S"),
        "fare": fare, "tip": tip, "tolls": tolls, "total": (fare + tip + tolls + 3.3).round(2),
        "payment": rng.choice(["cash", "credit card"], n),
        "pickup_zone": zones[rng.zipf(1.5, n) % 30], "dropoff_zone": zones[rng.zipf(1.5, n) % 30],
    })


def test_a_table_scores_zero_against_itself():
    real = trips()
    m = platform_metrics(real, real)
    distances = [v for k, v in m.items() if k.endswith("_tvd")]
    assert len(distances) == 11 and all(v == 0.0 for v in distances)
    assert m["viol_dropoff_before_pickup"] == m["viol_tip_over_fare"] == m["total_below_parts_share"] == 0
    assert m["pickup_zone_other_share"] == 0 and m["pickup_off_grid_share"] == 0
    ref = real_reference(real)
    assert ref["duration_median_s"] == pytest.approx(m["duration_median_s"])


def test_synthetic_datetime64_rows_are_read_like_the_text_ones():
    real = trips()
    synthetic = real.assign(pickup=pd.to_datetime(real.pickup).astype("datetime64[us]"),
                            dropoff=pd.to_datetime(real.dropoff).dt.tz_localize("America/New_York"))
    assert all(v == 0.0 for k, v in platform_metrics(real, synthetic).items() if k.endswith("_tvd"))


def test_time_resolutions_see_what_they_should():
    real = pd.Series(["2019-03-04 10:00:00"] * 10)  # a Monday, 10 o'clock
    later = pd.Series(["2019-03-04 11:00:00"] * 10)  # same day, other hour
    week_on = pd.Series(["2019-03-11 10:00:00"] * 10)  # a week later: same weekday and hour, other day
    m = time_metrics(real, later, "t")
    assert (m["t_hour_tvd"], m["t_weekday_tvd"], m["t_day_tvd"]) == (1.0, 0.0, 0.0)
    m = time_metrics(real, week_on, "t")
    assert (m["t_hour_tvd"], m["t_weekday_tvd"], m["t_day_tvd"]) == (0.0, 0.0, 1.0)
    off = pd.Series(pd.to_datetime(["2019-03-04 10:00:00.5"] * 10))
    assert time_metrics(real, off, "t")["t_off_grid_share"] == 1.0


def test_durations_zones_and_rules():
    real = trips()
    slow = real.assign(dropoff=(pd.to_datetime(real.dropoff) + pd.Timedelta(hours=2)).astype(str))
    m = duration_metrics(real, slow)
    assert m["duration_decile_tvd"] == pytest.approx(0.9)  # all in the top decile cell, which holds 10%
    assert m["duration_median_s"] == pytest.approx(real_reference(real)["duration_median_s"] + 7_200)
    other = zone_metrics(real.pickup_zone, pd.Series(["Other"] * 50 + [None] * 50), "z", top=5)
    assert other["z_other_share"] == 0.5
    top = set(real.pickup_zone.value_counts().index[:5])
    assert other["z_top5_tvd"] == pytest.approx(real.pickup_zone.isin(top).mean())
    broken = real.copy()
    broken.loc[:9, "dropoff"] = "2019-02-01 00:00:00"
    broken.loc[:4, "tip"] = broken.loc[:4, "fare"] + 1
    v = rule_violations(broken)
    assert (v["viol_dropoff_before_pickup"], v["viol_tip_over_fare"]) == (10, 5)


def test_references_keep_the_train_values_and_the_row_count():
    real = trips()
    for make in (independent_columns, bootstrap_rows, gaussian_copula):
        rows = make(real, 300, 1)
        assert list(rows.columns) == list(real.columns) and len(rows) == 300
        for column in real.columns:
            assert set(rows[column]) <= set(real[column])
    assert rule_violations(bootstrap_rows(real, 300, 1))["viol_dropoff_before_pickup"] == 0
    # the copula keeps the strong dependence of pickup and dropoff that independent columns lose
    copula, indep = platform_metrics(real, gaussian_copula(real, 2000, 0)), platform_metrics(
        real, independent_columns(real, 2000, 0))
    assert copula["viol_dropoff_before_pickup"] < indep["viol_dropoff_before_pickup"]


def test_summary_is_the_median_over_seeds():
    results = pd.DataFrame([
        {"method": m, "seed": s, "metric": "x", "value": v}
        for m, values in (("splice", (1.0, 2.0, 9.0)), ("bootstrap", (0.5, 0.5, 0.5))) for s, v in enumerate(values)
    ] + [{"method": "real_train", "seed": 0, "metric": "y", "value": 648.0}])
    table = summary(results)
    assert list(table.columns) == ["real_train", "splice", "bootstrap"] and list(table.index) == ["x", "y"]
    assert table.loc["x", "splice"] == 2.0
    text = markdown(table, "note")
    assert "| x |  | 2 | 0.5000 |" in text and "| y | 648 |" in text
