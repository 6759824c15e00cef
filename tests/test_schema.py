"""Schema parsing: every bundled schema loads; malformed entries are errors that quote the entry."""

from __future__ import annotations

import copy

import pytest
import yaml

from splice_assets.datasets import schema_dir
from splice_assets.schema import (
    SchemaError,
    category_key,
    load_schema,
    parse_schema,
    schema_to_dict,
)

GOOD = {
    "name": "toy",
    "version": 2,
    "n_min": 10,
    "target": "y",
    "task": "classification",
    "columns": [
        {"name": "age", "kind": "integer", "bounds": [0, 120]},
        {"name": "income", "kind": "continuous", "bounds": [0.0, 1e6], "nullable": True},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green"], "other": "OTHER"},
        {"name": "grade", "kind": "ordinal", "categories": [1, 2, 3]},
        {"name": "y", "kind": "boolean"},
    ],
}


def test_every_repository_schema_loads():
    paths = sorted(schema_dir().glob("*.yaml"))
    assert {p.stem for p in paths} >= {"fair_affairs", "adult", "california_housing"}
    for path in paths:
        schema = load_schema(path)
        assert schema.name == path.stem
        for spec in schema.columns:
            assert (spec.bounds is not None) == spec.is_numeric or spec.bounds_auto


def test_good_schema_parses_into_frozen_objects():
    schema = parse_schema(GOOD)
    assert schema.column_names == ("age", "income", "colour", "grade", "y")
    assert schema.column("colour").categories == ("red", "green", "OTHER")
    assert schema.column("y").categories == (False, True)
    assert schema.column("income").nullable and schema.column("income").bounds == (0.0, 1e6)
    with pytest.raises(AttributeError):
        schema.columns[0].name = "x"  # type: ignore[misc]


def test_schema_round_trips_through_dict():
    schema = parse_schema(GOOD)
    assert parse_schema(schema_to_dict(schema)) == schema


def _broken(path: list, value):
    raw = copy.deepcopy(GOOD)
    target = raw
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "quoted"),
    [
        (["version"], "one", "'one'"),
        (["version"], 0, "0"),
        (["n_min"], -5, "-5"),
        (["columns", 0, "kind"], "float", "'float'"),
        (["columns", 0, "bounds"], [5, 1], "[5, 1]"),
        (["columns", 0, "bounds"], ["a", 1], "['a', 1]"),
        (["columns", 0, "bounds"], [0, float("inf")], "inf"),
        (["columns", 0, "bounds"], KeyError, "public bounds"),
        (["columns", 2, "categories"], [], "[]"),
        (["columns", 2, "categories"], ["Red", "red "], "['red']"),
        (["columns", 1, "nullable"], "yes", "'yes'"),
        (["columns", 1, "categories"], ["a"], "'categories'"),
        (["columns", 3, "bounds"], [0, 1], "no bounds"),
        (["columns", 0, "colour"], 1, "'colour'"),
        (["target"], "nope", "'nope'"),
        (["task"], "ranking", "'ranking'"),
        (["columns", 4, "name"], "age", "['age']"),
    ],
)
def test_malformed_entries_are_quoted(path, value, quoted):
    with pytest.raises(SchemaError) as err:
        parse_schema(_broken(path, value))
    assert quoted in str(err.value)


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(SchemaError, match="cannot read"):
        load_schema(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SchemaError, match="not valid YAML"):
        load_schema(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(SchemaError, match="mapping"):
        load_schema(listed)


def test_auto_bounds_are_flagged():
    raw = _broken(["columns", 0, "bounds"], "auto")
    spec = parse_schema(raw).column("age")
    assert spec.bounds is None and spec.bounds_auto


@pytest.mark.parametrize(
    ("a", "b"),
    [("Ｒｅｄ", "red"), (" red ", "RED"), (1, "1.0"), (2.0, "2"), ("ﬁve", "five"), (True, "true")],
)
def test_category_keys_normalise_variants(a, b):
    assert category_key(a) == category_key(b)


def test_category_keys_keep_distinct_values_apart():
    assert category_key("1.5") != category_key("1")
    assert category_key("red") != category_key("reds")


def test_declared_decimals_round_the_synthetic_values_and_nothing_else():
    import numpy as np

    from splice_assets.layout import decode, layout_for

    schema = parse_schema({"name": "p", "version": 1, "n_min": 1, "columns": [
        {"name": "lat", "kind": "continuous", "bounds": [32.5, 42.0], "decimals": 2},
        {"name": "raw", "kind": "continuous", "bounds": [0.0, 1.0]},
    ]})
    assert parse_schema(schema_to_dict(schema)) == schema  # round-trips into the public bundle's schema.yaml
    x = np.random.default_rng(0).uniform(-1, 1, size=(500, layout_for(schema).d))
    table = decode(x, schema)
    assert np.allclose(table["lat"], table["lat"].round(2), rtol=0, atol=1e-12)
    assert table["lat"].between(32.5, 42.0).all()
    assert (table["raw"] != table["raw"].round(6)).mean() > 0.9  # undeclared: full precision


@pytest.mark.parametrize("column, words", [
    ({"name": "n", "kind": "integer", "bounds": [0, 9], "decimals": 2}, "continuous column"),
    ({"name": "x", "kind": "continuous", "bounds": [0, 9], "decimals": -1}, "-1"),
    ({"name": "x", "kind": "continuous", "bounds": [0, 9], "decimals": 1.5}, "1.5"),
])
def test_bad_decimals_are_refused_quoting_the_value(column, words):
    with pytest.raises(SchemaError, match="decimals") as caught:
        parse_schema({"name": "p", "version": 1, "n_min": 1, "columns": [column]})
    assert words in str(caught.value)
