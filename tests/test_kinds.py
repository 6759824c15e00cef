"""Column kinds are modules (``splice_assets.kinds``): a kind is asked, never branched on. A toy kind registered here
alone (a percentage written with a % sign) goes through the schema, validation, encoding, decoding and a fit; the
boolean kind reads 1/0 and never advises categories."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from splice_assets import MeasurementSettings, ModelSettings, PostProcessingSettings, Synthesizer, parse_schema
from splice_assets.encoding import encode
from splice_assets.evaluation.expectations import expected_type
from splice_assets.evaluation.metrics import _is_nominal, column_codes
from splice_assets.fine_cells import column_fine_cells
from splice_assets.kinds import kind_names, kind_of, register, unregister
from splice_assets.kinds.cells import parse_numbers
from splice_assets.kinds.continuous import Continuous
from splice_assets.kinds.fields import _fail
from splice_assets.kinds.integer import Integer
from splice_assets.kinds.ordinal import Ordinal
from splice_assets.layout import decode, output_dtypes
from splice_assets.private.validation import StructuralError, validate
from splice_assets.schema import SchemaError, schema_to_dict


class Percent(Continuous):
    """A number in [0, 100] written with a % sign ("12.5%"); its bounds are the kind's, not the schema's."""

    name: ClassVar[str] = "percent"
    draft_order: ClassVar[int | None] = None

    def parse_fields(self, where: str, raw: dict[str, Any]) -> dict[str, Any]:
        if "bounds" in raw:
            raise _fail(where, raw, "a percent column's bounds are [0, 100]")
        return super().parse_fields(where, {**raw, "bounds": [0, 100]})

    def fields_to_dict(self, spec: Any) -> dict[str, Any]:
        entry = super().fields_to_dict(spec)
        del entry["bounds"]
        return entry

    def parse(self, series: pd.Series, spec: Any) -> tuple[np.ndarray, np.ndarray]:
        text = series.astype("string").str.strip().str.removesuffix("%")
        return parse_numbers(text), series.isna().to_numpy()

    def output_series(self, values: np.ndarray, missing: np.ndarray, spec: Any) -> pd.Series:
        return pd.Series([None if m else f"{v:g}%" for v, m in zip(values, missing)], dtype="string")

    def output_dtype(self, spec: Any) -> str:
        return "string"

    def validated_dtype(self, spec: Any) -> str:
        return "float64"


@pytest.fixture
def percent():
    register(Percent())
    yield
    unregister("percent")


def toy_schema() -> Any:
    return parse_schema({"name": "toy_percent", "version": 1, "n_min": 50, "columns": [
        {"name": "share", "kind": "percent", "decimals": 1},
        {"name": "group", "kind": "categorical", "categories": ["a", "b"]}]})


def toy_table(n: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    group = rng.choice(["a", "b"], n, p=[0.7, 0.3])
    share = np.where(group == "a", rng.normal(20, 4, n), rng.normal(80, 5, n)).clip(0, 100)
    return pd.DataFrame({"share": [f"{v:.1f}%" for v in share], "group": group})


def test_the_five_kinds_are_registered_and_asked():
    assert kind_names() == ("continuous", "integer", "ordinal", "categorical", "boolean")
    assert [kind_of(k).numeric for k in kind_names()] == [True, True, False, False, False]


def test_a_toy_kind_goes_through_schema_validation_encoding_and_decoding(percent):
    schema = toy_schema()
    share = schema.column("share")
    assert share.bounds == (0.0, 100.0) and share.is_numeric and share.decimals == 1
    assert parse_schema(schema_to_dict(schema)) == schema
    with pytest.raises(SchemaError, match="bounds are"):
        parse_schema({**schema_to_dict(schema), "columns": [{"name": "s", "kind": "percent", "bounds": [0, 1]}]})
    raw = pd.DataFrame({"share": ["12.5%", " 50 %", "150%", "n/a"] + ["1%"] * 96, "group": ["a"] * 100})
    validated = validate(raw, toy_schema())
    assert validated.table["share"].tolist()[:4] == [12.5, 50.0, 100.0, 50.0]  # clipped; unparseable -> midpoint
    assert validated.report.counts["share"]["unparseable_to_missing"] == 1
    x = encode(validated.table, schema)
    assert x.shape == (100, 2) and np.all(np.abs(x) <= 1.0)
    out = decode(x, schema)
    assert out["share"].tolist()[:3] == ["12.5%", "50%", "100%"]
    assert output_dtypes(schema)["share"] == "string" == str(out["share"].dtype)
    with pytest.raises(StructuralError, match="'share': 20% of its non-empty cells are not numbers"):
        validate(raw.assign(share=["x"] * 20 + ["1%"] * 80), schema)


def test_a_toy_kind_is_fitted_and_sampled(percent):
    fast = dict(measurement=MeasurementSettings(n_directions=32, k=6), model=ModelSettings(components=3, max_steps=40),
                postprocessing=PostProcessingSettings(field_iterations=0))
    synthesizer = Synthesizer(toy_schema(), epsilon=1.0, delta=1e-6, **fast)
    rows = synthesizer.fit(toy_table(), ledger=None).sample(400, seed=1)
    assert list(rows.columns) == ["share", "group"] and str(rows["share"].dtype) == "string"
    values = rows["share"].str.removesuffix("%").astype(float)
    assert values.between(0, 100).all()


def test_an_unknown_kind_is_refused_with_the_registered_ones():
    with pytest.raises(SchemaError, match=r"kind must be one of \['boolean', 'categorical', 'continuous'"):
        parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [{"name": "p", "kind": "percent"}]})
    with pytest.raises(SchemaError, match="kind must be one of"):
        parse_schema({"name": "t", "version": 1, "n_min": 1, "columns": [{"name": "p", "kind": ["boolean"]}]})


BOOLEAN = parse_schema({"name": "flags", "version": 1, "n_min": 10, "columns": [
    {"name": "flag", "kind": "boolean"}, {"name": "maybe", "kind": "boolean", "nullable": True}]})


def test_a_boolean_reads_true_false_and_one_zero():
    raw = pd.DataFrame({"flag": ["1", "0", "true", "FALSE", " 1 ", "1.0", True, 0, 1.0, "0"],
                        "maybe": ["0", "1", None, np.nan, "True", "false", "1", "0", "1", "0"]})
    out = validate(raw, BOOLEAN).table
    assert out["flag"].tolist() == [True, False, True, False, True, True, True, False, True, False]
    assert out["maybe"].tolist()[:6] == [False, True, pd.NA, pd.NA, True, False]
    assert str(out["flag"].dtype) == "boolean"


def test_a_boolean_error_never_advises_categories():
    raw = pd.DataFrame({"flag": ["yes", "no", "2"] + ["1"] * 7, "maybe": ["1"] * 10})
    with pytest.raises(StructuralError) as refused:
        validate(raw, BOOLEAN)
    message = str(refused.value)
    assert "'flag': 30% of its non-empty cells are not true/false or 1/0" in message
    assert "categor" not in message and "other" not in message.split("(operator-only")[0]
    for entry in ({"categories": ["a"]}, {"other": "x"}):
        with pytest.raises(SchemaError, match="a boolean column takes no"):
            parse_schema({"name": "t", "version": 1, "n_min": 1,
                          "columns": [{"name": "b", "kind": "boolean", **entry}]})


class Count(Integer):
    """A toy integral kind: what the library asks of ``integral`` (derived rounding, the fine grid, the DP bounds'
    outward rounding) follows the flag, not the name ``integer``."""

    name: ClassVar[str] = "count"
    draft_order: ClassVar[int | None] = None


class Grade(Ordinal):
    """A toy ordered discrete kind: the metrics read it as ordered, not nominal."""

    name: ClassVar[str] = "grade"


@pytest.fixture
def toys():
    register(Count())
    register(Grade())
    yield
    unregister("count")
    unregister("grade")


def test_toy_kinds_are_asked_by_derived_columns_fine_cells_and_the_evaluation(toys, percent):
    schema = parse_schema({"name": "toys", "version": 1, "n_min": 10, "columns": [
        {"name": "visits", "kind": "count", "bounds": [0, 1000]},
        {"name": "share", "kind": "percent"},
        {"name": "grade", "kind": "grade", "categories": ["low", "mid", "high"], "nullable": True},
        {"name": "half", "kind": "count", "derived": "visits / 3"}]})
    visits, share, grade = schema.columns
    assert kind_of("count").grid_step(visits) == 1.0 and kind_of("percent").grid_step(share) is None
    assert column_fine_cells(visits, 0, None, 16).integer and not column_fine_cells(share, 1, None, 16).integer
    x = encode(pd.DataFrame({"visits": np.array([1, 2, 4], dtype=np.int64), "share": [1.0, 2.0, 3.0],
                             "grade": pd.Categorical(["low", None, "high"], ["low", "mid", "high"], ordered=True)}),
               schema)
    out = decode(x, schema)
    assert out["half"].tolist() == [0, 1, 1] and str(out["half"].dtype) == "Int64"  # nullable: it divides
    with pytest.raises(SchemaError, match="decimals must be"):
        parse_schema({**schema_to_dict(schema), "columns": [
            *schema_to_dict(schema)["columns"][:3],
            {"name": "half", "kind": "count", "derived": "visits", "decimals": 1}]})
    assert expected_type(visits) == "int64" and expected_type(share) == "StringDtype"
    assert expected_type(grade) == "CategoricalDtypeType"
    codes, levels = column_codes(out["grade"], grade)
    assert levels == 4 and codes.tolist() == [0, 3, 2]
    assert not _is_nominal(grade) and _is_nominal(BOOLEAN.columns[0])


def test_a_boolean_keeps_its_evaluation_codes_and_value_set():
    flag, maybe = BOOLEAN.columns
    codes, levels = column_codes(pd.Series(pd.array([True, None, False], dtype="boolean")), maybe)
    assert levels == 3 and codes.tolist() == [1, 2, 0]
    assert kind_of("boolean").output_values(flag) == [True, False] and expected_type(flag) == "BooleanDtype"
