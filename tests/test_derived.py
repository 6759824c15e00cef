"""Derived columns: declared arithmetic on other columns, computed in every synthetic row, never measured."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import ok
from test_cli import FAST, environment, run_process

from splice_assets import Synthesizer
from splice_assets.evaluation.expectations import check_synthetic
from splice_assets.layout import decode, layout_for
from splice_assets.schema import SchemaError, parse_schema, schema_to_dict

COLUMNS = [
    {"name": "minutes", "kind": "continuous", "bounds": [0, 500], "decimals": 1},
    {"name": "charge", "kind": "continuous", "derived": "minutes * 0.17", "decimals": 2},
    {"name": "calls", "kind": "integer", "bounds": [0, 100]},
    {"name": "per call", "kind": "continuous", "derived": "`minutes` / calls", "decimals": 3},
    {"name": "plan", "kind": "categorical", "categories": ["a", "b"]},
    {"name": "spare", "kind": "integer", "bounds": [0, 9], "nullable": True},
    {"name": "units", "kind": "integer", "derived": "calls + 2 * spare - (minutes - minutes)"},
]


def schema_of(columns: list[dict]) -> object:
    return parse_schema({"name": "tariffs", "version": 1, "n_min": 100, "columns": columns})


def test_derived_columns_keep_their_place_and_round_trip():
    schema = schema_of(COLUMNS)
    assert schema.output_names == ("minutes", "charge", "calls", "per call", "plan", "spare", "units")
    assert schema.column_names == ("minutes", "calls", "plan", "spare")  # what is measured and modelled
    assert [d.nullable for d in schema.derived] == [False, True, True]  # a division; a nullable input
    assert parse_schema(schema_to_dict(schema)) == schema  # the released schema.yaml keeps them


@pytest.mark.parametrize("expression, words", [
    ("minutes +", "not an arithmetic expression"),
    ("plan * 2", "'plan' is not numeric"),
    ("charge + 1", "'charge' is derived itself"),
    ("abs(minutes)", "+ - * / only"),
    ("minutes ** 2", "Pow"),
    ("price * minutes", "'price' is not a column"),
    ("3", "reads no column"),
    ("minutes * 'x'", "'x' is not a number"),
    (["minutes", 2], "written as text"),
])
def test_bad_expressions_are_refused_quoting_them(expression, words):
    with pytest.raises(SchemaError, match="column 'z'") as caught:
        schema_of([*COLUMNS, {"name": "z", "kind": "continuous", "derived": expression}])
    assert words in str(caught.value) and repr(expression) in str(caught.value)


@pytest.mark.parametrize("column, words", [
    ({"name": "z", "kind": "categorical", "derived": "minutes"}, "kind must be one of"),
    ({"name": "z", "kind": "integer", "derived": "minutes", "decimals": 1}, "decimals"),
    ({"name": "z", "kind": "continuous", "derived": "minutes", "bounds": [0, 1]}, "unknown keys ['bounds']"),
])
def test_bad_derived_entries_are_refused(column, words):
    with pytest.raises(SchemaError) as caught:
        schema_of([*COLUMNS, column])
    assert words in str(caught.value)


def test_a_derived_target_is_refused():
    with pytest.raises(SchemaError, match="target must be a modelled column"):
        parse_schema({"name": "t", "version": 1, "n_min": 1, "target": "charge", "columns": COLUMNS})


def test_every_decoded_row_satisfies_the_identity():
    schema = schema_of(COLUMNS)
    x = np.random.default_rng(0).uniform(-1, 1, size=(2_000, layout_for(schema).d))
    table = decode(x, schema)
    assert list(table.columns) == list(schema.output_names)
    assert np.array_equal(table["charge"], np.round(table["minutes"] * 0.17, 2))
    zero = table["calls"] == 0
    assert zero.any() and table.loc[zero, "per call"].isna().all()  # a zero divisor leaves the value missing
    assert np.allclose(table.loc[~zero, "per call"], np.round(table["minutes"] / table["calls"], 3)[~zero])
    assert table["units"].dtype == "Int64" and table["charge"].dtype == np.float64
    assert (table["units"].isna() == table["spare"].isna()).all() and table["spare"].isna().any()
    present = table["spare"].notna()
    assert (table.loc[present, "units"] == table.loc[present, "calls"] + 2 * table.loc[present, "spare"]).all()


def test_a_release_computes_derived_columns_and_measures_none_of_them():
    schema = schema_of(COLUMNS[:5])
    rng = np.random.default_rng(1)
    minutes = np.round(rng.gamma(4.0, 40.0, 3_000).clip(0, 500), 1)
    rows = pd.DataFrame({"minutes": minutes, "charge": -1.0, "calls": rng.integers(1, 100, 3_000),
                         "plan": rng.choice(["a", "b"], 3_000)})  # the input's own derived values are ignored
    synth = Synthesizer(schema, 1.0, 1e-9, "add-remove", 0)
    synth.fit(rows, ledger=None)
    assert synth.model is not None and synth.model.layout.d == layout_for(schema).d == 3  # none for them
    synthetic = synth.sample(1_500)
    assert np.array_equal(synthetic["charge"], np.round(synthetic["minutes"] * 0.17, 2))
    assert check_synthetic(synthetic, schema).success
    assert not check_synthetic(synthetic.drop(columns="charge"), schema).success


def test_a_cli_release_and_its_resample_keep_the_identity(tmp_path, monkeypatch):
    """Through the real release path (Dagster job, bundle, MLflow) and `splice sample` from the saved bundle."""
    for key, value in environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    rng = np.random.default_rng(2)
    minutes = np.round(rng.gamma(4.0, 40.0, 3_000).clip(0, 500), 1)
    pd.DataFrame({"minutes": minutes, "charge": np.round(minutes * 0.17, 2), "calls": rng.integers(1, 100, 3_000),
                  "plan": rng.choice(["a", "b"], 3_000)}).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "tariffs.yaml").write_text(yaml.safe_dump(schema_to_dict(schema_of(COLUMNS[:5]))))
    ok("budget", "set", "tariffs", "--epsilon", "10", "--delta", "1e-6")
    proc = run_process("release", "--schema", tmp_path / "tariffs.yaml", "--input", tmp_path / "rows.csv",
                       "--epsilon", "1", "--delta", "1e-9", *FAST, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)
    released = pd.read_parquet(f"{record['public_dir']}/synthetic.parquet")
    assert list(released.columns) == ["minutes", "charge", "calls", "per call", "plan"]
    assert np.array_equal(released["charge"], np.round(released["minutes"] * 0.17, 2))
    ok("sample", record["release_id"], "-n", "300", "--seed", "5", "--out", tmp_path / "again.csv")
    again = pd.read_csv(tmp_path / "again.csv")
    assert list(again.columns) == list(released.columns)
    assert np.allclose(again["charge"], np.round(again["minutes"] * 0.17, 2), rtol=0, atol=1e-9)
