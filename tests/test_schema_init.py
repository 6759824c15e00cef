"""`splice schema init`: a draft from the header and cell types; everything read from the data (every column's kind
and nullable, with --from-data its values) is marked, and the schema loader (so every release) refuses it until the
operator removes the mark."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from splice_assets.cli import main
from splice_assets.schema import SchemaError, load_schema

CSV = "age,income,colour,member,note\n34,1200.5,red,true,\n51,980,green,false,x\n27,,red,True,y\n"


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def people(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text(CSV)
    return path


def draft(tmp_path, people, *extra: str) -> dict:
    out = tmp_path / "people.yaml"
    result = run("schema", "init", "--input", people, "--out", out, *extra)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(out.read_text())


def test_init_drafts_names_kinds_and_nullability_and_leaves_the_domain(tmp_path, people):
    raw = draft(tmp_path, people)
    assert raw["name"] == "people" and raw["version"] == 1 and raw["n_min"] is None
    columns = {c["name"]: c for c in raw["columns"]}
    assert [c["name"] for c in raw["columns"]] == ["age", "income", "colour", "member", "note"]
    kinds = {name: (c["kind"], c["nullable"]) for name, c in columns.items()}
    assert kinds == {"age": ("integer", False), "income": ("continuous", True), "colour": ("categorical", False),
                     "member": ("boolean", False), "note": ("categorical", True)}
    assert columns["age"]["bounds"] is None and columns["colour"]["categories"] == []  # left to the operator
    # Kinds and nullability were read from the rows: every column is marked, booleans included.
    assert all(c["from_data"] is True for c in raw["columns"])
    raw.update(n_min=2)
    raw["columns"] = [{**c, "bounds": [0, 100]} if c["kind"] in ("integer", "continuous")
                      else {**c, "categories": ["a"]} if c["kind"] == "categorical" else c for c in raw["columns"]]
    (tmp_path / "people.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(SchemaError, match=r"column 'age': its kind, nullable, bounds or categories were taken"):
        load_schema(tmp_path / "people.yaml")
    for column in raw["columns"]:  # the operator confirms the kinds are public
        del column["from_data"]
    (tmp_path / "people.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert load_schema(tmp_path / "people.yaml").column("member").kind == "boolean"


def test_from_data_is_marked_and_refused_until_the_mark_is_removed(tmp_path, people):
    raw = draft(tmp_path, people, "--from-data")
    columns = {c["name"]: c for c in raw["columns"]}
    assert columns["age"]["bounds"] == [27, 51] and columns["income"]["bounds"] == [980.0, 1200.5]
    assert columns["colour"]["categories"] == ["green", "red"]
    assert all(c.get("from_data") is True for c in raw["columns"])
    raw["n_min"] = 2
    path = tmp_path / "people.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(SchemaError, match=r"column 'age': its kind, nullable, bounds or categories were taken from"):
        load_schema(path)
    # A release refuses it too, in one line that names the column, before reading anything else.
    result = run("release", "--schema", path, "--input", people, "--epsilon", "1", "--delta", "1e-3")
    assert result.exit_code == 1 and "column 'age'" in result.output and "from_data" in result.output
    assert len(result.output.strip().splitlines()) == 1
    for column in raw["columns"]:  # the operator confirms the values are public
        column.pop("from_data", None)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    schema = load_schema(path)
    assert schema.column("colour").categories == ("green", "red") and schema.column("age").bounds == (27.0, 51.0)


def test_init_prints_without_out_and_never_overwrites(tmp_path, people):
    printed = run("schema", "init", "--input", people, "--name", "crowd")
    assert printed.exit_code == 0 and printed.output.startswith("# Draft schema")
    assert yaml.safe_load(printed.output)["name"] == "crowd"
    existing = tmp_path / "taken.yaml"
    existing.write_text("keep me")
    result = run("schema", "init", "--input", people, "--out", existing)
    assert result.exit_code == 1 and "exists" in result.output and existing.read_text() == "keep me"
    missing = run("schema", "init", "--input", tmp_path / "nope.csv")
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_from_data_names_the_columns_the_rows_show_to_be_derived(tmp_path):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    minutes = np.round(rng.uniform(0, 300, 500), 1)
    parts = rng.integers(0, 50, (500, 2))
    pd.DataFrame({
        "minutes": minutes, "charge": np.round(minutes * 0.17, 2),  # a tariff, rounded to cents
        "a": parts[:, 0], "b": parts[:, 1], "total": parts.sum(axis=1),
        "near_total": parts.sum(axis=1) + (rng.uniform(size=500) < 0.05),  # off by one in 5% of rows: no identity
        "flag": (rng.uniform(size=500) < 0.01).astype(int),  # nearly constant: every identity would hold
    }).to_csv(tmp_path / "usage.csv", index=False)
    out = tmp_path / "usage.yaml"
    assert run("schema", "init", "--input", tmp_path / "usage.csv", "--out", out, "--from-data").exit_code == 0
    hints = [line[4:] for line in out.read_text().splitlines() if line.startswith("#   ") and " = " in line]
    assert hints == ["charge = minutes * 0.17", "total = a + b"]
    assert run("schema", "init", "--input", tmp_path / "usage.csv", "--out", tmp_path / "plain.yaml").exit_code == 0
    assert "look derived" not in (tmp_path / "plain.yaml").read_text()  # without --from-data nothing of the rows
