"""The bad-input catalogue: structural problems fail fast and clearly; record-level problems follow total rules."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

from splice_assets.private.validation import (
    DEFAULT_MAX_UNPARSEABLE_SHARE,
    MAX_CELL_CHARS,
    StructuralError,
    check_structure,
    conform,
    parse_numbers,
    read_table,
    validate,
)
from splice_assets.schema import parse_schema

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


#: The record-level tests use frames of a handful of rows, where one bad cell is far over the default limit.
ANY_SHARE = {"max_unparseable_share": 1.0}
OPERATOR_ONLY = "(operator-only message: computed from the private input)"


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
    out = validate(frame, SCHEMA, **ANY_SHARE)  # record-level when the limit allows it: no error at all
    assert out.table["income"].isna().all()
    for broken, kwargs in [(frame.drop(columns="age"), ANY_SHARE), (frame, {})]:
        with pytest.raises(StructuralError) as err:
            validate(broken, SCHEMA, **kwargs)
        assert "SECRET" not in str(err.value)


def rows(n: int) -> pd.DataFrame:
    """``n`` good rows as objects, so any cell can be replaced by text."""
    return pd.concat([good_rows()] * (n // 6 + 1), ignore_index=True).head(n).astype(object)


def test_a_numeric_column_of_no_numbers_is_refused_not_imputed(tmp_path):
    frame = rows(20)
    frame["age"] = "n/a"
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    for table in (frame, read_table(path)):  # objects, and the text a CSV is read as
        with pytest.raises(StructuralError) as err:
            validate(table, SCHEMA)
        message = str(err.value)
        assert message.startswith(
            "column 'age': 100% of its non-empty cells are not numbers (limit 5%); fix the input or the schema's kind"
        )
        assert message.endswith(OPERATOR_ONLY) and "n/a" not in message
    # The check that runs before `bounds: auto` charges anything refuses it too.
    with pytest.raises(StructuralError, match="column 'age': 100%"):
        check_structure(frame, SCHEMA, require_bounds=False)


def test_the_share_limit_is_strict_counts_non_empty_cells_and_rounds_up():
    frame = rows(40)
    frame.loc[:1, "age"] = "n/a"  # 2 of 40 = 5%: at the limit, repaired
    frame.loc[2:11, "age"] = None  # empty cells are missing, not "not numbers": 2 of 30 non-empty is over
    with pytest.raises(StructuralError, match=r"column 'age': 7% .*not numbers \(limit 5%\)"):
        validate(frame, SCHEMA)
    frame.loc[2:11, "age"] = 33
    out = validate(frame, SCHEMA)
    assert out.report.counts["age"]["unparseable_to_missing"] == 2
    assert validate(frame, SCHEMA, max_unparseable_share=1).report == out.report
    with pytest.raises(StructuralError, match=r"column 'age': 5% .*\(limit 4.9%\)"):
        validate(frame, SCHEMA, max_unparseable_share=0.049)
    frame["income"] = None  # an empty column has no cells that fail to parse
    assert validate(frame, SCHEMA, max_unparseable_share=0.05).table["income"].isna().all()
    with pytest.raises(StructuralError, match=r"column 'age': 5% .*\(limit 0%\)"):
        validate(frame, SCHEMA, max_unparseable_share=0)


def test_discrete_columns_without_other_are_refused_over_the_limit_naming_the_first():
    frame = rows(20)
    frame["colour"] = "purple"  # colour declares `other`: never refused
    frame.loc[:1, "city"] = "Berlin"  # 10%, nullable
    frame.loc[:4, "grade"] = 9  # 25%, non-nullable
    frame.loc[:1, "flag"] = "maybe"  # 10%, boolean
    frame.loc[:1, "income"] = "lots"  # 10%, numeric
    with pytest.raises(StructuralError) as err:
        validate(frame, SCHEMA)
    assert str(err.value) == (
        "column 'income': 10% of its non-empty cells are not numbers (limit 5%); fix the input or the schema's kind; "
        f"4 of 6 columns are over the limit {OPERATOR_ONLY}"
    )
    frame["income"] = 1.0
    with pytest.raises(StructuralError) as err:
        check_structure(frame, SCHEMA)
    assert str(err.value) == (
        "column 'city': 10% of its non-empty cells are not declared categories or longer than 10,000 characters "
        "(limit 5%); fix the input or the "
        f"schema's categories (or declare an `other`); 3 of 6 columns are over the limit {OPERATOR_ONLY}"
    )
    assert "Berlin" not in str(err.value) and "maybe" not in str(err.value)
    out = validate(frame, SCHEMA, max_unparseable_share=0.25)
    assert out.report.counts["colour"] == {"unseen_to_other": 20}


@pytest.mark.parametrize("bad", [-0.01, 1.5, float("nan"), float("inf"), "0.05", None, True, [0.05]])
def test_the_share_limit_is_checked_and_quoted(bad):
    for run in (validate, check_structure):
        with pytest.raises(ValueError, match=r"max_unparseable_share must be a number in \[0, 1\], got ") as err:
            run(good_rows(), SCHEMA, max_unparseable_share=bad)
        assert repr(bad) in str(err.value) and not isinstance(err.value, StructuralError)
    assert DEFAULT_MAX_UNPARSEABLE_SHARE == 0.05
    validate(good_rows(), SCHEMA, max_unparseable_share=np.float64(0.5))


# --- record level: total rules, never an error ---------------------------------------------------------


def test_numeric_cells_are_clipped_parsed_or_missing():
    frame = good_rows().astype(object)
    frame["age"] = [np.inf, -np.inf, 1e308, -5, "42", "1,234"]
    frame["income"] = [np.nan, None, " 12.5 ", "1.234,5", "inf", 2.0**60]
    out = validate(frame, SCHEMA, **ANY_SHARE)
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
    from_objects, from_text = validate(as_objects, SCHEMA, **ANY_SHARE), validate(as_text, SCHEMA, **ANY_SHARE)
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
    out = validate(frame, SCHEMA, **ANY_SHARE)
    assert out.table["colour"].tolist() == ["red", "green", "OTHER", "OTHER", "OTHER", "red"]
    city = out.table["city"]
    assert city[0] == "Zürich" and city[1] == "Paris" and city[2:5].isna().all()
    assert set(out.table["colour"].cat.categories) == {"red", "green", "OTHER"}  # domain never extended
    assert out.report.counts["colour"]["unseen_to_other"] == 2
    assert out.report.counts["city"]["unseen_to_missing"] == 1


def test_unknown_categories_follow_one_stated_rule():
    """`other` if declared, else missing if nullable, else the first declared category, counted by that name."""
    frame = rows(30)
    frame.loc[0, ["colour", "city", "grade", "flag"]] = ["purple", "Berlin", 9, "maybe"]  # 1 of 29 non-empty: repaired
    frame.loc[1, ["colour", "city", "grade", "flag"]] = None
    out = validate(frame, SCHEMA)
    assert out.table.loc[0, "colour"] == "OTHER" and pd.isna(out.table.loc[0, "city"])
    assert out.table.loc[0, "grade"] == 1 and not out.table.loc[0, "flag"]  # first category; false for a boolean
    assert out.table.loc[1, "colour"] == "OTHER" and out.table.loc[1, "grade"] == 1 and not out.table.loc[1, "flag"]
    counts = out.report.counts
    assert counts["colour"] == {"unseen_to_other": 1, "missing_in_non_nullable_imputed": 1}
    assert counts["city"] == {"unseen_to_missing": 1, "missing": 2}
    for name in ("grade", "flag"):  # unseen and missing are counted apart
        assert counts[name] == {"unseen_imputed_to_first_category": 1, "missing_in_non_nullable_imputed": 1}
    assert out.report.total("unseen_imputed_to_first_category") == 2


def test_constant_duplicate_and_all_missing_rows_are_kept():
    rows = good_rows()
    empty = pd.DataFrame([[None] * len(rows.columns)], columns=rows.columns, dtype=object)  # an all-missing row
    frame = pd.concat([rows, rows.iloc[[0, 0]], empty], ignore_index=True)
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


def test_a_byte_order_mark_before_the_header_is_not_part_of_the_first_name(tmp_path):
    frame = good_rows()
    plain, gzipped = tmp_path / "bom.csv", tmp_path / "bom.csv.gz"
    frame.to_csv(plain, index=False, encoding="utf-8-sig")  # what Excel's "CSV UTF-8" writes
    with gzip.open(gzipped, "wt", encoding="utf-8-sig") as handle:
        frame.to_csv(handle, index=False)
    expected = validate(frame, SCHEMA).table
    for path in (plain, gzipped):
        assert path.read_bytes()[:3] == b"\xef\xbb\xbf" or gzip.decompress(path.read_bytes())[:3] == b"\xef\xbb\xbf"
        table = read_table(path)
        assert list(table.columns) == list(SCHEMA.column_names)
        assert table["age"].tolist() == ["30", "40", "50", "60", "70", "80"]
        pd.testing.assert_frame_equal(validate(table, SCHEMA).table, expected)


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
    out = validate(frame, schema, **ANY_SHARE).table["c"]
    assert out.astype(object).where(out.notna(), None).tolist() == ["1", "true", "1", "1", "true", None, None, "true"]


# --- typed inputs and over-long cells ----------------------------------------------------------------------


def test_a_typed_column_of_the_wrong_type_is_refused_naming_the_type(tmp_path):
    frame = rows(20)
    frame["age"] = pd.Timestamp("2020-01-01")
    frame["income"] = frame["income"].astype(float)
    path = tmp_path / "t.parquet"
    frame.astype({"colour": str, "city": str, "grade": int, "flag": bool}).to_parquet(path, index=False)
    expected = "column 'age': Parquet/DataFrame type datetime64[ns] where a number was declared"
    for table in (frame, read_table(path)):
        for check in (validate, lambda t, s: check_structure(t, s, require_bounds=False)):
            with pytest.raises(StructuralError) as err:
                check(table, SCHEMA)
            assert str(err.value).startswith(expected.replace("datetime64[ns]", str(table["age"].dtype))), err.value
            assert "datetime64[" in str(err.value)
    frame = rows(20)
    frame["income"] = [True, False] * 10
    with pytest.raises(StructuralError, match=r"column 'income': Parquet/DataFrame type bool where a number"):
        validate(frame, SCHEMA)
    frame = rows(20)
    frame["colour"] = pd.Timedelta("1D")
    with pytest.raises(StructuralError, match=r"column 'colour': .*timedelta64\[.s\] where categories were declared"):
        validate(frame, SCHEMA)


def test_a_cell_over_the_length_limit_counts_as_unparseable_in_its_column():
    """One huge cell is not a category: in a column with `other` it is not sent there but counted as unparseable,
    under the share rule: a share over the limit refuses the input naming the column, at or below it the cell is
    missing (then the non-nullable rule), counted apart."""
    huge = "x" * (MAX_CELL_CHARS + 1)
    frame = rows(19)
    frame.loc[0, "colour"] = huge  # colour declares `other`
    frame.loc[0, "city"] = "Paris " + huge  # nullable, no `other`
    frame.loc[0, "age"] = "1" * (MAX_CELL_CHARS + 1)  # digits, but no number is that long
    with pytest.raises(StructuralError) as err:
        validate(frame, SCHEMA)
    assert str(err.value).startswith("column 'age': 6% of its non-empty cells are not numbers")
    frame.loc[0, "age"] = 30
    for check in (validate, check_structure):
        with pytest.raises(StructuralError) as err:
            check(frame, SCHEMA)
        assert str(err.value).startswith(
            "column 'colour': 6% of its non-empty cells are longer than 10,000 characters (limit 5%)"
        ), err.value
        assert huge not in str(err.value)
    out = validate(frame, SCHEMA, max_unparseable_share=0.06)
    assert out.report.counts["colour"] == {"too_long_to_missing": 1, "missing_in_non_nullable_imputed": 1}
    assert out.table.loc[0, "colour"] == "OTHER"  # colour's rule for a missing cell, not the unseen rule
    assert out.report.counts["city"] == {"too_long_to_missing": 1, "missing": 1}
    assert pd.isna(out.table.loc[0, "city"])
    exactly = rows(20)
    exactly.loc[0, "colour"] = "r" * MAX_CELL_CHARS  # at the limit: an unseen category, as before
    assert validate(exactly, SCHEMA).report.counts["colour"] == {"unseen_to_other": 1}
