"""``bounds: auto`` and ``resolution: auto`` on datetime and date columns: their DP estimate (``private.bounds``).

A datetime's period comes from a noisy month histogram on the public grid 1970-01 to 2099-12 and its unit from a noisy
histogram of the coarsest unit each value is a multiple of, both in the estimate's one draw. The tests: the entries
parse and round-trip; a seeded estimate finds March 2019 and minutes; planted noise moves both choices (they read the
noisy counts); a neighbour moves the drawn vector by at most the declared sensitivity under both relations; and a
whole release samples inside the resolved period on the resolved unit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.common import seeded_noise
from splice_assets import Synthesizer
from splice_assets.kinds.temporal import MONTH_CELLS, UNIT_CELLS
from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
from splice_assets.private import mechanism
from splice_assets.private.bounds import (
    estimate_bounds,
    estimate_bounds_from_counts,
    exact_months,
    exact_units,
    needs_estimate,
    period_auto_columns,
    resolution_auto_columns,
    schema_sensitivity,
)
from splice_assets.private.partitions import list_partitions, scan_source
from splice_assets.schema import SchemaError, TableSchema, parse_schema, schema_to_dict

PLANT = 1e5


def schema(*columns: dict, rules: list | None = None) -> TableSchema:
    return parse_schema({"name": "times", "version": 1, "n_min": 100,
                         "columns": [{"name": "x", "kind": "continuous", "bounds": [0, 1]}, *columns],
                         **({"rules": rules} if rules else {})})


AUTO = {"name": "at", "kind": "datetime", "bounds": "auto", "resolution": "auto"}


def march(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Timestamps in March 2019 on whole minutes (as a CSV gives them), beside a number."""
    rng = np.random.default_rng(seed)
    minutes = rng.integers(0, 31 * 24 * 60, n)
    at = (pd.Timestamp("2019-03-01") + pd.to_timedelta(minutes * 60, unit="s")).astype(str)
    return pd.DataFrame({"x": rng.uniform(size=n), "at": at})


def run(table_schema: TableSchema, table: pd.DataFrame, relation: str = RELATION_ADD_REMOVE):  # noqa: ANN201
    return estimate_bounds(table, table_schema, 5.0, 1e-6, None, "times", relation)


# -- parsing --------------------------------------------------------------------------------------------------------


def test_auto_entries_parse_and_round_trip() -> None:
    parsed = schema(AUTO, {"name": "day", "kind": "date", "bounds": ["2019-01-01", "auto"]},
                    {"name": "clock", "kind": "time", "resolution": "auto"})
    at, day, clock = parsed.lowered
    assert at.bounds_auto == (True, True) and at.resolution_auto and at.resolution == "second"
    assert day.bounds_auto == (False, True) and day.bounds == ("2019-01-01", "2100-01-01")
    assert clock.resolution_auto and clock.bounds is None
    assert parsed.column("at.time").bounds == (0.0, 86399.0)  # laid out for seconds until resolved
    assert needs_estimate(parsed)
    assert [c.name for c in period_auto_columns(parsed)] == ["at", "day"]
    assert [c.name for c in resolution_auto_columns(parsed)] == ["at", "clock"]
    entries = {c["name"]: c for c in schema_to_dict(parsed)["columns"]}
    assert entries["at"]["bounds"] == "auto" and entries["at"]["resolution"] == "auto"
    assert entries["day"]["bounds"] == ["2019-01-01", "auto"]
    assert parse_schema(schema_to_dict(parsed)) == parsed


def test_refusals() -> None:
    with pytest.raises(SchemaError, match="month grid"):
        schema({"name": "at", "kind": "datetime", "bounds": ["2150-01-01", "auto"]})
    with pytest.raises(SchemaError, match="later column"):
        schema({"name": "a", "kind": "datetime", "bounds": ["2019-01-01", "2019-02-01"]},
               {"name": "b", "kind": "datetime", "bounds": ["2019-01-01", "2019-03-01"], "resolution": "auto"},
               rules=["b >= a"])


# -- the estimate ---------------------------------------------------------------------------------------------------


def test_seeded_estimate_finds_the_month_and_the_minute() -> None:
    with seeded_noise(3):
        resolved, estimate = run(schema(AUTO), march())
    assert estimate.found_periods == {"at": ("2019-03-01", "2019-04-01")}
    assert estimate.found_resolutions == {"at": "minute"}
    at = resolved.lowered[0]
    assert at.bounds == ("2019-03-01", "2019-04-01") and at.resolution == "minute"
    assert not at.resolution_auto and at.bounds_auto == (False, False) and not needs_estimate(resolved)
    assert resolved.column("at.time").bounds == (0.0, 1439.0)  # the parts rebuilt for the estimates
    declared = schema({"name": "at", "kind": "datetime", "bounds": ["2019-03-01", "2019-04-01"],
                       "resolution": "minute"})
    assert resolved.column("at.week").bounds == declared.column("at.week").bounds  # from the resolved period
    assert resolved.column("at.week").bounds != parse_schema(schema_to_dict(schema(AUTO))).column("at.week").bounds
    assert parse_schema(schema_to_dict(resolved)) == resolved  # a plain entry


def test_a_rules_earlier_column_and_a_public_end() -> None:
    """The earlier column of a rule gets its period; a half-auto entry keeps its public end; a day-only column gets
    day resolution and loses its time part."""
    table = march()
    table["until"] = (pd.to_datetime(table["at"]) + pd.Timedelta(hours=1)).astype(str)
    table["day"] = pd.to_datetime(table["at"]).dt.normalize().astype(str)
    parsed = schema(AUTO, {"name": "until", "kind": "datetime", "bounds": ["2019-03-01", "2019-04-02"]},
                    {"name": "day", "kind": "datetime", "bounds": ["2019-02-15", "auto"], "resolution": "auto"},
                    rules=["until >= at"])
    with seeded_noise(4):
        resolved, estimate = run(parsed, table)
    assert estimate.found_periods == {"at": ("2019-03-01", "2019-04-01"), "day": ("2019-02-15", "2019-04-01")}
    assert estimate.found_resolutions == {"at": "minute", "day": "day"}
    assert [p for c in resolved.lowered if c.name == "day" for p in c.parts] == ["day.week", "day.weekday"]
    assert "day.time" not in resolved.column_names
    assert parse_schema(schema_to_dict(resolved)) == resolved


def planted(monkeypatch: pytest.MonkeyPatch, offset) -> None:  # noqa: ANN001 (a function of the exact vector)
    monkeypatch.setattr(mechanism, "gaussian_noise", lambda values, sigma: np.asarray(values, float) + offset(values))


def test_the_choices_read_the_noisy_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a large noisy count in 2021-06 and in the second cell. The rows lie in March 2019 on minutes."""
    assert len(run(schema(AUTO), march())[1].found_periods) == 1

    def offset(values: np.ndarray) -> np.ndarray:
        out = np.zeros(len(values))
        assert len(values) == MONTH_CELLS + len(UNIT_CELLS)  # the month histogram, then the unit histogram
        out[(2021 - 1970) * 12 + 5] = PLANT
        out[MONTH_CELLS + UNIT_CELLS.index("second")] = PLANT
        return out

    planted(monkeypatch, offset)
    _, estimate = run(schema(AUTO), march())
    assert estimate.found_periods == {"at": ("2019-03-01", "2021-07-01")}
    assert estimate.found_resolutions == {"at": "second"}


def test_the_exact_counts_alone_give_the_rows_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    planted(monkeypatch, lambda values: np.zeros(len(values)))
    _, estimate = run(schema(AUTO), march())
    assert estimate.found_periods == {"at": ("2019-03-01", "2019-04-01")}
    assert estimate.found_resolutions == {"at": "minute"}


# -- sensitivity ----------------------------------------------------------------------------------------------------


def drawn(monkeypatch: pytest.MonkeyPatch, table_schema: TableSchema, table: pd.DataFrame, relation: str
          ) -> np.ndarray:
    """The exact vector the estimate's draw noises (through its real path)."""
    seen: list[np.ndarray] = []

    def record(values: np.ndarray, sigma: float) -> np.ndarray:
        seen.append(np.array(values, dtype=np.float64))
        return np.asarray(values, dtype=np.float64)

    monkeypatch.setattr(mechanism, "gaussian_noise", record)
    run(table_schema, table, relation)
    return seen[0]


@pytest.mark.parametrize("relation", [RELATION_ADD_REMOVE, RELATION_REPLACE_ONE])
def test_a_neighbour_moves_the_draw_by_at_most_the_sensitivity(monkeypatch: pytest.MonkeyPatch,
                                                                relation: str) -> None:
    """Worst neighbours: a row in another month at a finer unit, a missing or unreadable cell, a removed row. Each
    moves the month and unit histograms by at most the declared sensitivity, and the worst meets it."""
    parsed = schema(AUTO, {"name": "day", "kind": "date", "bounds": "auto"})
    table = march(400)
    table["day"] = pd.to_datetime(table["at"]).dt.date.astype(str)
    extreme = {"x": 0.5, "at": "2099-12-31 23:59:59", "day": "1970-01-01"}
    blank = {"x": 0.5, "at": None, "day": "not a date"}
    if relation == RELATION_ADD_REMOVE:
        others = [pd.concat([table, pd.DataFrame([row])], ignore_index=True) for row in (extreme, blank)]
        others.append(table.drop(index=7).reset_index(drop=True))
    else:
        others = []
        for row in (extreme, blank):
            other = table.copy()
            other.iloc[7] = pd.Series(row)
            others.append(other)
    base = drawn(monkeypatch, parsed, table, relation)
    shifts = [float(np.linalg.norm(drawn(monkeypatch, parsed, other, relation) - base)) for other in others]
    declared = schema_sensitivity(parsed, relation)
    assert declared == pytest.approx(math.sqrt((2 if relation == RELATION_REPLACE_ONE else 1) * 3))
    assert max(shifts) <= declared + 1e-9, (shifts, declared)
    assert max(shifts) == pytest.approx(declared)  # the argument is tight: no slack hides a miscount


# -- the streamed path and a whole release --------------------------------------------------------------------------


def test_the_streamed_scan_counts_what_the_table_counts(tmp_path) -> None:  # noqa: ANN001
    parsed = schema(AUTO)
    table = march(1000)
    for i, part in enumerate(np.array_split(np.arange(len(table)), 3)):
        table.iloc[part].to_csv(tmp_path / f"part{i}.csv", index=False)
    scan = scan_source(list_partitions(str(tmp_path)), parsed)
    from splice_assets.lowering import lower_input

    lowered = lower_input(table, parsed)
    assert scan.months_counts is not None and scan.units_counts is not None
    np.testing.assert_array_equal(scan.months_counts, exact_months(lowered, period_auto_columns(parsed)))
    np.testing.assert_array_equal(scan.units_counts, exact_units(lowered, resolution_auto_columns(parsed)))
    with seeded_noise(5):
        resolved, estimate = estimate_bounds_from_counts(
            scan.bounds_counts, parsed, 5.0, 1e-6, None, "times", RELATION_ADD_REMOVE,
            months=scan.months_counts, units=scan.units_counts)
    assert estimate.found_periods == {"at": ("2019-03-01", "2019-04-01")}
    with pytest.raises(ValueError, match="exact histograms"):
        estimate_bounds_from_counts(scan.bounds_counts, parsed, 5.0, 1e-6, None, "times", RELATION_ADD_REMOVE)


def test_a_release_samples_inside_the_resolved_period_on_the_resolved_unit() -> None:
    synth = Synthesizer(schema(AUTO), epsilon=1, delta=1e-6, relation="add-remove").fit(march(4000), ledger=None)
    assert synth.bounds is not None
    assert synth.bounds.found_periods == {"at": ("2019-03-01", "2019-04-01")}
    assert synth.bounds.found_resolutions == {"at": "minute"}
    out = synth.sample(500)["at"]
    assert out.notna().all()
    assert out.min() >= pd.Timestamp("2019-03-01") and out.max() <= pd.Timestamp("2019-04-01")
    assert (out.dt.second == 0).all() and (out.dt.minute != 0).any()
