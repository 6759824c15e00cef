"""Issue 71: `schema init` drafts integer codes as categorical, leaves an ordinal's order to the operator, finds
derived products and ratios, and says where `scale: log` or `knots: auto` may serve a crowded column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from splice_assets.private.schema_draft import derived_candidates, draft_schema


def drafted(tmp_path: Path, table: pd.DataFrame, from_data: bool = True) -> tuple[dict[str, dict], str]:
    path = tmp_path / "t.csv"
    table.to_csv(path, index=False)
    text = draft_schema(path, from_data=from_data)
    return {c["name"]: c for c in yaml.safe_load(text)["columns"]}, text


def comments(text: str, name: str) -> str:
    """The comment block just above a column's entry, joined."""
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(f"- name: {name}") or
                          line.startswith(f"- {{name: {name},")))
    block = []
    for line in reversed(lines[:at]):
        if not line.startswith("# "):
            break
        block.append(line[2:].strip())
    return " ".join(reversed(block))


def test_few_integer_codes_are_categorical_in_numeric_order_with_how_to_switch(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 400
    table = pd.DataFrame({
        "region": rng.choice([1, 2, 3, 10, 11], n),  # 5 codes: categorical, 2 before 10
        "age": rng.integers(18, 90, n),  # many values: an integer
        "flag": rng.integers(0, 2, n),  # 0/1: as before, an integer (with a note)
        "zip": [f"0{z}" for z in rng.integers(1000, 9999, n)],  # leading zeros: codes, never integers
        "eleven": rng.integers(0, 11, n),  # 11 values: more than MAX_CODES, an integer
    })
    columns, text = drafted(tmp_path, table)
    assert columns["region"]["kind"] == "categorical"
    assert columns["region"]["categories"] == ["1", "2", "3", "10", "11"]
    note = comments(text, "region")
    assert "read as codes" in note and "`kind: integer`" in note and "`kind: ordinal`" in note
    assert "numeric, not a known one" in note
    assert columns["age"]["kind"] == "integer" and columns["eleven"]["kind"] == "integer"
    assert columns["flag"]["kind"] == "integer" and "`kind: boolean`" in comments(text, "flag")
    assert columns["zip"]["kind"] == "categorical" and "leading zeros" in comments(text, "zip")
    assert columns["zip"]["categories"] == "auto"  # many distinct codes: the open domain
    plain, _ = drafted(tmp_path, table, from_data=False)  # the kind is read from the rows either way
    assert plain["region"]["kind"] == "categorical" and plain["region"]["categories"] == []


def test_a_few_rows_of_distinct_integers_stay_integers(tmp_path: Path) -> None:
    columns, _ = drafted(tmp_path, pd.DataFrame({"age": [34, 51, 27], "code": ["007", "012", "100"]}))
    assert columns["age"]["kind"] == "integer" and columns["code"]["kind"] == "categorical"


def test_ordered_looking_categories_are_left_to_the_operator(tmp_path: Path) -> None:
    table = pd.DataFrame({
        "risk": ["low", "medium", "high", "very high"] * 10,
        "band": ["18-25", "26-40", "41-65", "65+"] * 10,
        "colour": ["red", "green", "blue", "black"] * 10,
    })
    columns, text = drafted(tmp_path, table)
    assert columns["risk"]["kind"] == "categorical"
    assert columns["risk"]["categories"] == ["high", "low", "medium", "very high"]  # alphabetical: not guessed
    assert "`kind: ordinal` needs them in their public order" in comments(text, "risk")
    assert "alphabetical, not a known one" in comments(text, "risk")
    assert "ordinal" in comments(text, "band")
    assert comments(text, "colour") == ""


def test_products_and_ratios_are_named_in_the_expression_language(tmp_path: Path) -> None:
    from splice_assets.derived import parse_expression

    rng = np.random.default_rng(1)
    n = 600
    price = np.round(rng.uniform(1, 50, n), 2)
    quantity = rng.integers(1, 20, n)
    hours = np.round(rng.uniform(1, 60, n), 1)
    wage = np.round(rng.uniform(10, 40, n), 2)
    table = pd.DataFrame({
        "price": price, "quantity": quantity, "amount": np.round(price * quantity, 2),  # a product
        "hours": hours, "pay": np.round(hours * wage, 2), "rate": np.round(np.round(hours * wage, 2) / hours, 2),
        "noise": np.round(rng.uniform(0, 100, n), 2),
    })
    found = derived_candidates(table.astype(str))
    assert "amount = price * quantity" in found and "rate = pay / hours" in found
    assert not any(line.startswith(("noise", "price", "quantity", "hours")) for line in found)
    for line in found:
        parse_expression(line.split(" = ", 1)[1])  # what derived.py accepts
    _, text = drafted(tmp_path, table)
    assert "#   amount = price * quantity" in text and "#   rate = pay / hours" in text
    _, plain = drafted(tmp_path, table, from_data=False)
    assert "look derived" not in plain


def test_a_ratio_by_zero_does_not_hold(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n = 500
    a = rng.uniform(1, 10, n).round(2)
    b = rng.integers(0, 5, n)  # 0 in a fifth of the rows, where the ratio is missing but c is not
    c = np.where(b > 0, np.round(a / np.where(b > 0, b, 1), 2), 0.0)
    found = derived_candidates(pd.DataFrame({"a": a, "b": b, "c": c}), {"a": "continuous", "b": "integer",
                                                                         "c": "continuous"})
    assert not any(line.startswith("c = a / b") for line in found)


def test_crowded_columns_get_the_scale_and_knots_hints_with_from_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 2_000
    table = pd.DataFrame({
        "income": np.round(rng.lognormal(8, 1.5, n)),  # spans orders of magnitude: scale: log
        "size": np.r_[rng.normal(3, 0.2, n - 4), [0, 0.5, 7.5, 8]].round(3),  # crowded, not skewed: knots
        "spread": rng.uniform(0, 100, n).round(2),  # fills its range: nothing
    })
    _, text = drafted(tmp_path, table)
    income, size = comments(text, "income"), comments(text, "size")
    assert "`scale: log`" in income and "p99/p50" in income
    assert "`knots: auto`" in size and "0039-knots-auto.md" in size and "scale: log" not in size
    assert comments(text, "spread") == ""
    _, plain = drafted(tmp_path, table, from_data=False)
    assert "knots" not in plain.split("columns:")[1] and "p99/p50" not in plain
