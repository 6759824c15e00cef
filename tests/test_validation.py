"""The bad-input catalogue: structural problems fail fast and clearly; record-level problems follow total rules."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

from splice_assets.schema import parse_schema
from splice_assets.validation import StructuralError, conform, parse_numbers, read_table, validate

SCHEMA = parse_schema(
    {
        "name": "toy",
        "version": 3,
        "n_min": 4,
        "columns": [
            {"name": "age", "kind": "integer", "bounds": [0, 120]},
            {"name": "income", "kind": "continuous", "bounds": [0, 1000], "nullable": True},
            {"name": "colour", "kind": "categorical", "categories": ["red", "green"], "other": "OTHER"},
            {"name": "city", "kind": "categorical", "categories": ["Zürich", "Paris"], "nullable": True},
            {"name": "grade", "kind": "ordinal", "categories": [1, 2, 3]},
            {"name": "flag", "kind": "boolean"},
        ],
    }
)


def good_rows(n: int = 6) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "age": [30, 40, 50, 60, 70, 80][:n],
            "income": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0][:n],
            "colour": (["red", "green"] * 3)[:n],
            "city": (["Paris", "Zürich"] * 3)[:n],
            "grade": [1, 2, 3, 1, 2, 3][:n],
            "flag": ([True, False] * 3)[:n],
        }
    )


# --- structural: clear error naming the column and the problem, nothing else happens --------------------


def test_missing_column_is_named():
    with pytest.raises(StructuralError, match="column 'income'.*missing"):
        validate(good_rows().drop(columns="income"), SCHEMA)


def test_duplicate_column_names_in_frame_and_file(tmp_path):
    frame = good_rows()
    frame.columns = ["age", "age", "colour", "city", "grade", "flag"]
    with pytest.raises(StructuralError, match="column 'age'.*duplicate"):
        validate(frame, SCHEMA)
    path = tmp_path / "dup.csv"
    path.write_text("age,income,age\n1,2,3\n")
    with pytest.raises(StructuralError, match="column 'age'.*duplicate"):
        read_table(path)


def test_unreadable_files(tmp_path):
    with pytest.raises(StructuralError, match="does not exist"):
        read_table(tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(StructuralError, match="empty or has no header"):
        read_table(empty)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81\x82" * 50)
    with pytest.raises(StructuralError, match="cannot read"):
        read_table(binary)
    broken_parquet = tmp_path / "x.parquet"
    broken_parquet.write_bytes(b"not parquet at all")
    with pytest.raises(StructuralError, match="cannot read"):
        read_table(broken_parquet)


def test_schema_version_drift():
    with pytest.raises(StructuralError, match="version drift.*expects version 2.*version 3"):
        validate(good_rows(), SCHEMA, expected_version=2)


def test_too_few_rows():
    with pytest.raises(StructuralError, match="n_min=4"):
        validate(good_rows(3), SCHEMA)


def test_structural_errors_never_quote_cell_values():
    frame = good_rows()
    frame["income"] = ["SECRET-VALUE"] * 6
    out = validate(frame, SCHEMA)  # record-level: no error at all
    assert out.table["income"].isna().all()
    with pytest.raises(StructuralError) as err:
        validate(frame.drop(columns="age"), SCHEMA)
    assert "SECRET" not in str(err.value)


# --- record level: total rules, never an error ---------------------------------------------------------


def test_numeric_cells_are_clipped_parsed_or_missing():
    frame = good_rows().astype(object)
    frame["age"] = [np.inf, -np.inf, 1e308, -5, "42", "1,234"]
    frame["income"] = [np.nan, None, " 12.5 ", "1.234,5", "inf", 2.0**60]
    out = validate(frame, SCHEMA)
    assert out.table["age"].tolist() == [120, 0, 120, 0, 42, 60]  # "1,234" -> missing -> public midpoint
    income = out.table["income"]
    assert math.isnan(income[0]) and math.isnan(income[1]) and math.isnan(income[3])
    assert income[2] == 12.5 and income[4] == 1000 and income[5] == 1000
    counts = out.report.counts
    assert counts["age"]["infinite_clipped"] == 2 and counts["age"]["out_of_bounds_clipped"] == 2
    assert counts["age"]["missing_in_non_nullable_imputed"] == 1
    assert counts["income"]["missing"] == 3 and counts["income"]["unparseable_to_missing"] == 1


def test_only_plain_decimal_literals_parse():
    text = ["+1.5", " -INF ", "Infinity", "1e5", ".5", "5.", "1E-3", "\u00a012\u00a0", "-0", "00012", "1e400",
            "0x10", "1,5", "1.234,5", "nan", "", "\u0663", "\uff11\uff12", "1_000", "1.2.3", "+-1", "e5", ".", "inf5"]
    expected = [1.5, -np.inf, np.inf, 1e5, 0.5, 5.0, 1e-3, 12.0, 0.0, 12.0, np.inf] + [np.nan] * 13
    for dtype in (object, "str"):  # objects (frames built in code) and text (what CSVs are read as)
        np.testing.assert_array_equal(parse_numbers(pd.Series(text, dtype=dtype)), expected)


def test_text_columns_validate_like_the_same_values_as_objects():
    """CSV cells arrive as text; their discrete columns take a faster path than object columns, to the same result."""
    frame = good_rows().astype(object)
    frame["colour"] = ["RED ", "ｇｒｅｅｎ", "purple", None, "red", "green"]
    frame["city"] = ["zu\u0308rich", "PARIS", "Berlin", None, np.nan, "Paris"]
    frame["income"] = [" 12.5 ", "1.234,5", "inf", None, "7", "-3"]
    strings = frame.astype("str").where(frame.notna(), None)
    as_text, as_objects = strings.astype("str"), strings.astype(object)
    assert all(isinstance(t, pd.StringDtype) for t in as_text.dtypes) and set(as_objects.dtypes) == {np.dtype(object)}
    from_objects, from_text = validate(as_objects, SCHEMA), validate(as_text, SCHEMA)
    pd.testing.assert_frame_equal(from_objects.table, from_text.table)
    assert from_objects.report == from_text.report
    assert from_text.report.counts["colour"]["unseen_to_other"] == 1  # "purple"


def test_integers_beyond_2_53_are_clipped_not_errors():
    frame = good_rows().astype(object)
    frame["age"] = [str(2**53 + 1), 2**63 - 1, -(2**70), "9" * 400, 5, 6]
    out = validate(frame, SCHEMA)
    assert out.table["age"].tolist() == [120, 120, 0, 120, 5, 6]


def test_categories_unseen_unicode_and_injection():
    frame = good_rows().astype(object)
    frame["colour"] = ["RED ", "ｇｒｅｅｎ", "purple", "=cmd|' /C calc'!A0", None, "red"]
    frame["city"] = ["zu\u0308rich", "PARIS", "Berlin", None, np.nan, "Paris"]
    out = validate(frame, SCHEMA)
    assert out.table["colour"].tolist() == ["red", "green", "OTHER", "OTHER", "OTHER", "red"]
    city = out.table["city"]
    assert city[0] == "Zürich" and city[1] == "Paris" and city[2:5].isna().all()
    assert set(out.table["colour"].cat.categories) == {"red", "green", "OTHER"}  # domain never extended
    assert out.report.counts["colour"]["unseen_to_other"] == 2
    assert out.report.counts["city"]["unseen_to_missing"] == 1


def test_constant_duplicate_and_all_missing_rows_are_kept():
    frame = pd.concat([good_rows(), good_rows().iloc[[0, 0]]], ignore_index=True)
    frame.loc[len(frame)] = [None] * 6
    frame["grade"] = 2
    out = validate(frame, SCHEMA)
    assert len(out.table) == len(frame) == 9
    assert (out.table["grade"] == 2).all()


def test_extra_columns_dropped_and_order_matched_by_name():
    frame = good_rows()[["flag", "grade", "city", "colour", "income", "age"]]
    frame["secret_extra"] = "x"
    out = validate(frame, SCHEMA)
    assert list(out.table.columns) == list(SCHEMA.column_names)
    assert out.report.dropped_columns == ("secret_extra",)
    pd.testing.assert_series_equal(out.table["age"], pd.Series([30, 40, 50, 60, 70, 80], name="age"))


def test_output_honours_the_pandera_contract_and_dtypes():
    out = validate(good_rows(), SCHEMA)
    conform(out.table, SCHEMA)
    assert str(out.table["age"].dtype) == "int64"
    assert str(out.table["income"].dtype) == "float64"
    assert out.table["grade"].cat.ordered and not out.table["colour"].cat.ordered
    assert str(out.table["flag"].dtype) == "boolean"
    broken = out.table.copy()
    broken["age"] = broken["age"] + 1000
    with pytest.raises(StructuralError, match="column 'age'"):
        conform(broken, SCHEMA)


def test_csv_gzip_and_parquet_inputs(tmp_path):
    frame = good_rows()
    csv_gz = tmp_path / "t.csv.gz"
    with gzip.open(csv_gz, "wt", encoding="utf-8") as handle:
        frame.to_csv(handle, index=False)
    parquet = tmp_path / "t.parquet"
    frame.to_parquet(parquet)
    a = validate(read_table(csv_gz), SCHEMA).table
    b = validate(read_table(parquet), SCHEMA).table
    pd.testing.assert_frame_equal(a, b)


def test_bundled_demo_validates(demo_table, demo_schema):
    out = validate(demo_table, demo_schema)
    assert len(out.table) == len(demo_table) >= 5000
    assert out.report.total("unparseable_to_missing") == 0


def test_values_equal_in_python_but_keyed_differently_stay_apart():
    """Validation keys each distinct value once; True == 1 == 1.0 in Python must not merge "true" with "1"."""
    schema = parse_schema(
        {"name": "keys", "version": 1, "n_min": 1,
         "columns": [{"name": "c", "kind": "categorical", "categories": ["1", "true"], "nullable": True}]}
    )  # fmt: skip
    frame = pd.DataFrame({"c": pd.Series([1, True, 1.0, "1", "TRUE", None, 7, True], dtype=object)})
    out = validate(frame, schema).table["c"]
    assert out.astype(object).where(out.notna(), None).tolist() == ["1", "true", "1", "1", "true", None, None, "true"]
