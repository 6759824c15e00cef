"""Tests for the schema-generated Great Expectations suite (synthetic rows only, no values in results)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_metrics import mixed_schema, mixed_table

from splice_assets.evaluation.expectations import (
    build_suite,
    check_synthetic,
    ephemeral_context,
    run_suite,
)


@pytest.fixture(scope="module")
def schema():
    return mixed_schema()


@pytest.fixture(scope="module")
def valid(schema):
    return mixed_table(400, 7, schema=schema)


def test_valid_table_passes(schema, valid):
    res = check_synthetic(valid, schema, null_rate_bounds={"income": (0.0, 0.2), "job": (0.0, 0.5)})
    assert res.success, res.failed()
    assert res.n_failed == 0 and res.n_passed == res.n_expectations == len(res.results)
    types = {r.expectation_type for r in res.results}
    assert {
        "expect_table_columns_to_match_ordered_list",
        "expect_column_values_to_be_between",
        "expect_column_values_to_be_in_set",
        "expect_column_values_to_not_be_null",
        "expect_column_proportion_of_non_null_values_to_be_between",
    } <= types
    # non-nullable columns get a not-null check, nullable ones do not
    not_null = {r.column for r in res.results if r.expectation_type == "expect_column_values_to_not_be_null"}
    assert not_null == {"age", "score", "edu", "owner", "label"}


def test_broken_bound_fails(schema, valid):
    bad = valid.copy()
    bad.loc[3, "score"] = 9.5  # bounds are [-4, 4]
    res = check_synthetic(bad, schema)
    assert not res.success
    assert [(r.expectation_type, r.column) for r in res.failed()] == [("expect_column_values_to_be_between", "score")]


def test_other_breaks_are_caught(schema, valid):
    bad = valid.copy()
    bad["age"] = bad["age"].astype("Int64")  # wrong dtype (schema: non-nullable int64)
    bad["edu"] = bad["edu"].astype(str)  # not categorical
    bad.loc[0, "owner"] = pd.NA  # null in a non-nullable column
    res = check_synthetic(bad, schema, null_rate_bounds={"income": (0.5, 1.0)})
    failed = {(r.expectation_type, r.column) for r in res.failed()}
    assert ("expect_column_values_to_be_in_type_list", "age") in failed
    assert ("expect_column_values_to_be_of_type", "edu") in failed
    assert ("expect_column_values_to_not_be_null", "owner") in failed
    assert ("expect_column_proportion_of_non_null_values_to_be_between", "income") in failed
    reordered = check_synthetic(valid[list(reversed(valid.columns))], schema)
    assert ("expect_table_columns_to_match_ordered_list", None) in {
        (r.expectation_type, r.column) for r in reordered.failed()
    }


def test_a_suite_runs_once_per_rows_and_schema(schema, valid, monkeypatch):
    """The asset check and the report run the same suite on the same rows: the second call reuses the first's
    summary, and any change to the rows (a value, a dtype, the column order) or to the bounds runs it afresh."""
    from splice_assets.evaluation import expectations

    runs = []
    real = expectations._check_synthetic
    monkeypatch.setattr(expectations, "_check_synthetic", lambda *a: runs.append(1) or real(*a))
    monkeypatch.setattr(expectations, "_SUMMARIES", {})
    first = check_synthetic(valid, schema)
    assert check_synthetic(valid.copy(), schema) is first and len(runs) == 1
    changed = valid.copy()
    changed.loc[3, "score"] = 9.5
    assert not check_synthetic(changed, schema).success
    assert check_synthetic(valid.astype({"age": "Int64"}), schema).n_failed == 1
    assert not check_synthetic(valid[list(reversed(valid.columns))], schema).success
    assert check_synthetic(valid, schema, null_rate_bounds={"income": (0.5, 1.0)}).n_failed == 1
    assert len(runs) == 5


def test_results_hold_no_cell_values(schema, valid):
    bad = valid.copy()
    marker = 3.999123
    bad.loc[5, "score"] = marker
    bad.loc[6, "income"] = 1234.5678  # out of bounds
    context = ephemeral_context()
    raw = run_suite(bad, build_suite(schema, context=context), context=context)
    assert not raw.success
    for r in raw.results:
        assert not r.result, r.result  # BOOLEAN_ONLY: empty result dicts, no observed values or samples
    summary = check_synthetic(bad, schema)
    text = json.dumps(summary.to_dict())
    assert "1234" not in text and "3.999" not in text
    assert set(summary.to_dict()["results"][0]) == {"expectation_type", "column", "success", "raised_exception"}


def test_null_rate_bounds_validation(schema):
    with pytest.raises(ValueError):
        build_suite(schema, null_rate_bounds={"nope": (0.0, 0.1)})
    with pytest.raises(ValueError):
        build_suite(schema, null_rate_bounds={"income": (0.5, 0.1)})
