"""The lowered kinds (datetime, date, time, id; text refused), schema rules, their schema drafts and typed inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from splice_assets.api import Synthesizer
from splice_assets.lowering import assemble_output, lower_input
from splice_assets.private.schema_draft import draft_schema
from splice_assets.private.validation import StructuralError, read_table, validate
from splice_assets.schema import SchemaError, parse_schema, schema_to_dict

ORDERS = """
name: orders
version: 1
n_min: 100
columns:
  - {name: order_id, kind: id, format: "ORD{6}"}
  - {name: created_at, kind: datetime, bounds: [2024-01-01, 2024-04-01], resolution: second}
  - {name: ship_date, kind: date, bounds: [2024-01-01, 2024-05-01]}
  - {name: fare, kind: continuous, bounds: [0, 100], decimals: 2}
  - {name: tip, kind: continuous, bounds: [0, 50], decimals: 2}
  - {name: status, kind: categorical, categories: [paid, pending]}
  - {name: days_to_ship, kind: continuous, derived: "(ship_date - created_at) / 86400"}
rules:
  - {rule: ship_date >= created_at, bounds: [0, 10]}
  - {rule: tip <= fare, bounds: [0, 100]}
"""
#: The same with the offsets' ranges and bin edges left to the DP estimate.
ORDERS_AUTO = ORDERS.replace("{rule: ship_date >= created_at, bounds: [0, 10]}", "ship_date >= created_at")


def orders(n: int = 1_500, seed: int = 0) -> pd.DataFrame:
    """Orders placed in the afternoon on weekdays (busier on Mondays), shipped 0-5 days later."""
    rng = np.random.default_rng(seed)
    days = rng.integers(0, 91, n)
    weekday = (pd.Timestamp("2024-01-01") + pd.to_timedelta(days, unit="D")).day_of_week
    days = np.where((weekday >= 5) & (rng.random(n) < 0.8), days - weekday + 4, days)  # weekends moved to Fridays
    seconds = np.clip(rng.normal(15, 2, n), 0, 23.99) * 3600
    created = pd.Timestamp("2024-01-01") + pd.to_timedelta(days, unit="D") + pd.to_timedelta(seconds.round(), unit="s")
    ship = created.normalize() + pd.to_timedelta(rng.integers(0, 6, n), unit="D")
    fare = np.round(rng.uniform(5, 80, n), 2)
    return pd.DataFrame({
        "order_id": [f"X{i}" for i in range(n)],
        "created_at": created.strftime("%Y-%m-%d %H:%M:%S"),
        "ship_date": ship.strftime("%Y-%m-%d"),
        "fare": fare.astype(str),
        "tip": np.round(fare * rng.uniform(0, 0.3, n), 2).astype(str),
        "status": rng.choice(["paid", "pending"], n, p=[0.8, 0.2]),
    })


def test_the_schema_lowers_each_kind_into_modelled_parts_and_round_trips() -> None:
    schema = parse_schema(yaml.safe_load(ORDERS))
    assert schema.column_names == ("created_at.week", "created_at.weekday", "created_at.time",
                                   "ship_date - created_at", "fare - tip", "tip", "status")
    assert schema.output_names == ("order_id", "created_at", "ship_date", "fare", "tip", "status", "days_to_ship")
    assert schema.input_names == ("tip", "status", "created_at", "ship_date", "fare")
    assert parse_schema(schema_to_dict(schema)) == schema


def test_parts_and_back_are_exact_at_the_resolution() -> None:
    schema = parse_schema(yaml.safe_load(ORDERS))
    raw = orders(200)
    lowered = lower_input(raw, schema)
    first = pd.Timestamp(raw["created_at"][0])
    assert lowered["created_at.weekday"][0] == ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[first.day_of_week]
    assert lowered["created_at.time"][0] == first.hour * 3600 + first.minute * 60 + first.second
    table = validate(raw, schema).table
    out = assemble_output(table, schema, seed=0)
    assert (out["created_at"] == pd.to_datetime(raw["created_at"])).all()
    assert (out["ship_date"] == pd.to_datetime(raw["ship_date"])).all()
    assert np.allclose(out["fare"], raw["fare"].astype(float))
    assert out["order_id"].is_unique and out["order_id"].str.fullmatch(r"ORD\d{6}").all()


def test_zone_aware_cells_are_read_in_the_declared_zone() -> None:
    schema = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "at", "kind": "datetime", "bounds": ["2024-03-01", "2024-04-01"], "timezone": "Europe/Paris"}]})
    raw = pd.DataFrame({"at": ["2024-03-10T12:00:00Z", "2024-03-10 12:00:00", "2024-03-10T12:00:00+05:00"]})
    hours = lower_input(raw, schema)["at.time"].to_numpy() // 3600
    assert hours.tolist() == [13, 12, 8]  # UTC noon is 13:00 in Paris; a naive cell is Paris time already
    out = assemble_output(validate(raw, schema).table, schema)
    assert str(out["at"].dt.tz) == "Europe/Paris" and out["at"].dt.hour.tolist() == [13, 12, 8]


def test_unreadable_timestamps_are_refused_naming_the_column() -> None:
    schema = parse_schema(yaml.safe_load(ORDERS))
    raw = orders(600)
    raw.loc[:99, "created_at"] = "yesterday afternoon"
    with pytest.raises(StructuralError, match=r"column 'created_at': 17% of its non-empty cells are not dates"):
        validate(raw, schema)


def test_bad_entries_are_refused_with_what_to_do() -> None:
    def schema_with(columns: list, rules: list | None = None) -> None:
        parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": columns, **({"rules": rules} if rules else {})})

    with pytest.raises(SchemaError, match="categories: auto"):
        schema_with([{"name": "note", "kind": "text"}])
    with pytest.raises(SchemaError, match="public period"):  # bounds: auto on a rule's later column
        schema_with([{"name": "at", "kind": "datetime", "bounds": ["2024-01-01", "2024-02-01"]},
                     {"name": "until", "kind": "datetime", "bounds": "auto"}], ["until >= at"])
    with pytest.raises(SchemaError, match="resolution must be one of"):
        schema_with([{"name": "at", "kind": "datetime", "bounds": ["2024-01-01", "2024-02-01"], "resolution": "ms"}])
    with pytest.raises(SchemaError, match="format must be"):
        schema_with([{"name": "k", "kind": "id", "format": "ORD"}])
    with pytest.raises(SchemaError, match="two numeric, two datetime"):
        schema_with([{"name": "a", "kind": "continuous", "bounds": [0, 1]}], ["a >= b"])
    with pytest.raises(SchemaError, match="time of day has no order"):
        schema_with([{"name": "t", "kind": "time"}, {"name": "u", "kind": "time"}], ["t >= u"])


def test_a_release_keeps_the_rules_the_keys_and_the_calendar() -> None:
    """Fit at epsilon = 3 on 1,500 orders: no rule is broken in 3,000 rows, keys are unique, timestamps are on the
    second, and the weekday and hour shapes survive (TVD within 0.08 of the real ones: the noise at this n)."""
    schema = parse_schema(yaml.safe_load(ORDERS_AUTO))
    raw = orders()
    synth = Synthesizer(schema, epsilon=3.0, delta=1e-6, relation="add-remove").fit(raw, ledger=None)
    out = synth.sample(3_000, seed=1)
    assert list(out.columns) == list(schema.output_names)
    assert (out["ship_date"] >= out["created_at"].dt.normalize()).all()
    assert (out["tip"] <= out["fare"]).all()
    assert out["order_id"].is_unique
    assert (out["ship_date"] == out["ship_date"].dt.normalize()).all()
    real = pd.to_datetime(raw["created_at"])

    def tvd(a: pd.Series, b: pd.Series) -> float:
        return 0.5 * float(a.value_counts(normalize=True).sub(b.value_counts(normalize=True), fill_value=0).abs().sum())

    assert tvd(out["created_at"].dt.day_of_week, real.dt.day_of_week) < 0.08
    assert tvd(out["created_at"].dt.hour, real.dt.hour) < 0.08
    assert np.allclose(out["days_to_ship"], (out["ship_date"] - out["created_at"]).dt.total_seconds() / 86400)
    # Conditional rows on a period (the week part conditions the model; each row is checked on its instant).
    week = synth.sample(400, seed=2, where="created_at between '2024-02-05' and '2024-02-11' and status == 'paid'")
    assert len(week) == 400 and (week["status"] == "paid").all()
    assert week["created_at"].between(pd.Timestamp("2024-02-05"), pd.Timestamp("2024-02-11 23:59:59")).all()
    assert week.attrs["condition"]["rejected_share"] < 0.5  # the week is conditioned exactly, days nearly
    with pytest.raises(ValueError, match="outside the public period"):
        synth.sample(10, where={"created_at": ("2025-01-01", None)})


def test_keys_are_unique_across_partitions(tmp_path: Path) -> None:
    schema = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "k", "kind": "id", "format": "uuid"}, {"name": "s", "kind": "id"},
        {"name": "p", "kind": "id", "format": "K{4}"},
        {"name": "x", "kind": "continuous", "bounds": [0, 1]}]})
    raw = pd.DataFrame({"x": np.random.default_rng(0).random(300).astype(str)})
    synth = Synthesizer(schema, epsilon=1.0, delta=1e-6).fit(raw, ledger=None)
    files = synth.write_partitions(str(tmp_path), n_rows=250, rows_per_partition=100)
    rows = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    assert rows["k"].is_unique and rows["p"].is_unique and rows["s"].tolist() == list(range(1, 251))


def test_days_outside_the_period_move_by_whole_weeks_into_it() -> None:
    """The first and last weeks are whole weeks: a (week, weekday) before the period's start or after its end moves
    by a week into it, keeping its weekday and time of day, instead of piling up on the bound."""
    schema = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "at", "kind": "datetime", "bounds": ["2019-03-01", "2019-04-01"]}]})
    assert schema.columns[0].bounds == (2565.0, 2569.0)  # Monday 25 February to Monday 25 March
    weekdays = pd.Categorical(["Mon", "Wed", "Fri"], categories=["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"])
    parts = pd.DataFrame({"at.week": [2565, 2565, 2565], "at.weekday": weekdays, "at.time": [32_405, 61_200, 7]})
    out = assemble_output(parts, schema)["at"].astype(str).tolist()
    assert out == ["2019-03-04 09:00:05", "2019-03-06 17:00:00", "2019-03-01 00:00:07"]


def test_a_pattern_too_small_for_the_rows_is_refused() -> None:
    schema = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "k", "kind": "id", "format": "A{1}"}, {"name": "x", "kind": "continuous", "bounds": [0, 1]}]})
    with pytest.raises(ValueError, match="holds 10 keys; 11 rows"):
        assemble_output(pd.DataFrame({"x": np.zeros(11)}), schema)


def test_schema_init_drafts_the_platform_kinds(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 200
    table = orders(n).assign(
        order_id=[f"ORD{i:06d}" for i in rng.permutation(n)],
        at_time=[f"{h:02d}:{m:02d}:00" for h, m in zip(rng.integers(0, 24, n), rng.integers(0, 60, n))],
        note=[f"the customer called about parcel {i} twice this week" for i in range(n)],
    )
    path = tmp_path / "orders.csv"
    table.to_csv(path, index=False)
    drafted = {c["name"]: c for c in yaml.safe_load(draft_schema(path, from_data=True))["columns"]}
    assert drafted["order_id"]["kind"] == "id" and drafted["order_id"]["format"] == "ORD{6}"
    created = pd.to_datetime(table["created_at"])
    assert drafted["created_at"]["kind"] == "datetime" and drafted["created_at"]["bounds"] == [  # whole days
        created.min().date().isoformat(), (created.max().normalize() + pd.Timedelta(days=1)).date().isoformat()]
    assert drafted["ship_date"]["kind"] == "date"
    assert drafted["at_time"]["kind"] == "time"
    assert drafted["note"]["kind"] == "text"


def test_typed_parquet_columns_are_read_natively(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 100
    frame = pd.DataFrame({
        "at": pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(rng.integers(0, 86_400 * 30, n), unit="s"),
        "flag": pd.array(rng.random(n) < 0.3, dtype="boolean"),
        "cat": pd.Categorical(rng.choice(["a", "b"], n)),
        "count": pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 5, n)), dtype="Int64"),
        "label": pd.array(rng.choice(["x", "y"], n), dtype="string"),
    })
    frame.to_parquet(tmp_path / "t.parquet")
    schema = parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [
        {"name": "at", "kind": "datetime", "bounds": ["2024-01-01", "2024-02-01"]},
        {"name": "flag", "kind": "boolean"}, {"name": "cat", "kind": "categorical", "categories": ["a", "b"]},
        {"name": "count", "kind": "integer", "bounds": [0, 4], "nullable": True},
        {"name": "label", "kind": "categorical", "categories": ["x", "y"]}]})
    checked = validate(read_table(tmp_path / "t.parquet"), schema)
    assert sum(sum(c.values()) for c in checked.report.counts.values()) == checked.report.counts["count"]["missing"]
    out = assemble_output(checked.table, schema)
    assert (out["at"] == frame["at"].dt.tz_localize(None)).all()
