"""Great Expectations (1.x) suite generated from the public schema, run on SYNTHETIC rows only.

The suite checks column order, dtypes, numeric bounds, category sets, non-null for non-nullable columns and,
optionally, null-rate bounds for nullable columns. Validation uses ``result_format="BOOLEAN_ONLY"`` so no
cell values or samples end up in results, and the returned summary keeps only (type, column, success).

GE runs in an ephemeral context (nothing written to disk) with analytics and progress bars disabled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from splice_assets.kinds import kind_of
from splice_assets.kinds.lowered import lowered_kind_of
from splice_assets.schema import ColumnSpec, TableSchema

# Must be set before great_expectations is imported anywhere in the process.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

if TYPE_CHECKING:  # pragma: no cover
    import great_expectations as gx

RESULT_FORMAT = "BOOLEAN_ONLY"
# What ExpectColumnValuesToBeOfType reports for the dtypes validate()/decode() produce.
_CATEGORICAL_TYPE = "CategoricalDtypeType"


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's outcome: no observed values, only whether it held."""

    expectation_type: str
    column: str | None
    success: bool
    raised_exception: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "expectation_type": self.expectation_type,
            "column": self.column,
            "success": self.success,
            "raised_exception": self.raised_exception,
        }


@dataclass(frozen=True)
class ExpectationSummary:
    """Outcome of the schema suite on a synthetic table."""

    suite_name: str
    success: bool
    n_expectations: int
    n_passed: int
    n_failed: int
    results: tuple[ExpectationOutcome, ...]

    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(r for r in self.results if not r.success)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite_name": self.suite_name,
            "success": self.success,
            "n_expectations": self.n_expectations,
            "n_passed": self.n_passed,
            "n_failed": self.n_failed,
            "results": [r.to_dict() for r in self.results],
        }


def _gx() -> Any:
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    return gx


def ephemeral_context() -> Any:
    """A fresh in-memory GE context with progress bars off (suites need an active context in GE 1.x)."""
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def expected_type(spec: ColumnSpec) -> str:
    """The dtype name GE should see for a validated column.

    Numeric and boolean columns are checked with ``ExpectColumnValuesToBeInTypeList`` (which compares the
    exact dtype, so int64 vs Int64 is told apart); categorical/ordinal columns with
    ``ExpectColumnValuesToBeOfType("CategoricalDtypeType")`` since GE 1.x cannot match a CategoricalDtype
    instance in a type list. The name is that of the kind's output dtype: an extension dtype's class name
    (``BooleanDtype``, ``Int64Dtype``), a NumPy dtype's name (``int64``, ``float64``).
    """
    return _dtype_name(kind_of(spec.kind).output_dtype(spec))


def _dtype_name(name: str) -> str:
    dtype = pd.api.types.pandas_dtype(name)
    if isinstance(dtype, pd.CategoricalDtype):
        return _CATEGORICAL_TYPE
    return type(dtype).__name__ if isinstance(dtype, pd.api.extensions.ExtensionDtype) else str(dtype)


def _type_expectation(spec: ColumnSpec) -> Any:
    import great_expectations.expectations as gxe

    if expected_type(spec) == _CATEGORICAL_TYPE:
        return gxe.ExpectColumnValuesToBeOfType(column=spec.name, type_=_CATEGORICAL_TYPE)
    return gxe.ExpectColumnValuesToBeInTypeList(column=spec.name, type_list=[expected_type(spec)])


def build_suite(
    schema: TableSchema,
    null_rate_bounds: Mapping[str, tuple[float, float]] | None = None,
    name: str | None = None,
    context: Any = None,
) -> gx.ExpectationSuite:
    """The expectation suite implied by the schema (public: depends on the schema and the given bounds only).

    ``null_rate_bounds`` maps a nullable column to (min, max) share of missing values; it becomes an
    ``ExpectColumnProportionOfNonNullValuesToBeBetween(1 - max, 1 - min)``. GE 1.x needs an active context to
    build a suite; one is created (ephemeral) unless ``context`` is given.
    """
    gx = _gx()
    if context is None:
        context = ephemeral_context()
    import great_expectations.expectations as gxe

    parts = {p for c in schema.lowered for p in c.parts}
    null_rate_bounds = {c: b for c, b in (null_rate_bounds or {}).items() if c not in parts}
    unknown = sorted(set(null_rate_bounds) - set(schema.column_names))
    if unknown:
        raise ValueError(f"null_rate_bounds names columns not in schema {schema.name!r}: {unknown}")
    suite = gx.ExpectationSuite(name=name or f"{schema.name}_v{schema.version}_synthetic")
    suite.add_expectation(gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(schema.output_names)))
    for derived in schema.derived:  # the dtype of a modelled column of the same kind and nullability
        dtype = expected_type(ColumnSpec(derived.name, derived.kind, derived.nullable))
        suite.add_expectation(gxe.ExpectColumnValuesToBeInTypeList(column=derived.name, type_list=[dtype]))
    for lowered in schema.lowered:  # datetimes, keys and a rule's later column: type, nulls, unique keys
        if lowered.spec is not None:
            suite.add_expectation(_type_expectation(lowered.spec))
        else:
            dtype = _dtype_name(lowered_kind_of(lowered.kind).output_dtype(lowered))
            suite.add_expectation(gxe.ExpectColumnValuesToBeInTypeList(column=lowered.name, type_list=[dtype]))
        if not lowered.nullable:
            suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=lowered.name))
        if lowered.kind == "id":
            suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column=lowered.name))
    for spec in schema.columns:
        column = spec.name
        if column in parts:
            continue
        suite.add_expectation(_type_expectation(spec))
        if spec.is_numeric:
            assert spec.bounds is not None, f"column {column!r} has unresolved 'auto' bounds"
            lo, hi = spec.bounds
            suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=column, min_value=lo, max_value=hi))
        else:
            values = kind_of(spec.kind).output_values(spec)
            assert values is not None
            suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column=column, value_set=values))
        if not spec.nullable:
            suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=column))
        if column in null_rate_bounds:
            lo_rate, hi_rate = (float(v) for v in null_rate_bounds[column])
            if not 0.0 <= lo_rate <= hi_rate <= 1.0:
                raise ValueError(f"column {column!r}: null-rate bounds must satisfy 0 <= min <= max <= 1")
            suite.add_expectation(
                gxe.ExpectColumnProportionOfNonNullValuesToBeBetween(
                    column=column, min_value=1.0 - hi_rate, max_value=1.0 - lo_rate
                )
            )
    return suite


def run_suite(synthetic: pd.DataFrame, suite: gx.ExpectationSuite, context: Any = None) -> Any:
    """Validate a DataFrame of SYNTHETIC rows in an ephemeral context; returns GE's raw validation result
    (``BOOLEAN_ONLY``: the per-expectation ``result`` dicts carry no values)."""
    if context is None:
        context = ephemeral_context()
    source = context.data_sources.add_pandas(name="synthetic")
    batch_definition = source.add_dataframe_asset(name="synthetic_rows").add_batch_definition_whole_dataframe(
        name="all_rows"
    )
    suite = context.suites.add(suite)
    batch = batch_definition.get_batch(batch_parameters={"dataframe": synthetic})
    return batch.validate(suite, result_format=RESULT_FORMAT)


#: Summaries of the suites already run in this process, by ``_suite_key``: a release runs the same suite on the
#: same synthetic rows twice (the Dagster asset check and the fidelity report), and GE takes about a second a run.
_SUMMARIES: dict[str, ExpectationSummary] = {}
_MAX_SUMMARIES = 8


def _suite_key(
    synthetic: pd.DataFrame, schema: TableSchema, null_rate_bounds: Mapping[str, tuple[float, float]] | None
) -> str:
    """A digest of everything a suite's outcome depends on: the rows (values, index, column order, exact dtypes,
    categories included), the schema and the null-rate bounds."""
    from splice_assets.schema import schema_to_dict

    digest = hashlib.sha256()
    digest.update(json.dumps([schema_to_dict(schema), sorted((null_rate_bounds or {}).items())], default=str,
                             sort_keys=True).encode())
    digest.update(repr([(str(c), repr(t)) for c, t in synthetic.dtypes.items()]).encode())
    digest.update(pd.util.hash_pandas_object(synthetic, index=True).to_numpy().tobytes())
    return digest.hexdigest()


def check_synthetic(
    synthetic: pd.DataFrame,
    schema: TableSchema,
    null_rate_bounds: Mapping[str, tuple[float, float]] | None = None,
) -> ExpectationSummary:
    """Build the schema suite, run it on ``synthetic`` and return a value-free summary. The same suite on the same
    rows runs once per process: a second call returns the first one's summary (an immutable value)."""
    key = _suite_key(synthetic, schema, null_rate_bounds)
    summary = _SUMMARIES.get(key)
    if summary is None:
        summary = _check_synthetic(synthetic, schema, null_rate_bounds)
        while len(_SUMMARIES) >= _MAX_SUMMARIES:
            _SUMMARIES.pop(next(iter(_SUMMARIES)))
        _SUMMARIES[key] = summary
    return summary


def _check_synthetic(
    synthetic: pd.DataFrame,
    schema: TableSchema,
    null_rate_bounds: Mapping[str, tuple[float, float]] | None,
) -> ExpectationSummary:
    context = ephemeral_context()
    suite = build_suite(schema, null_rate_bounds, context=context)
    result = run_suite(synthetic, suite, context=context)
    outcomes = []
    for r in result.results:
        config = r.expectation_config
        exception = bool((r.exception_info or {}).get("raised_exception", False))
        column = config.kwargs.get("column")
        outcomes.append(
            ExpectationOutcome(str(config.type), None if column is None else str(column), bool(r.success), exception)
        )
    n_passed = sum(o.success for o in outcomes)
    return ExpectationSummary(
        suite_name=suite.name,
        success=bool(result.success),
        n_expectations=len(outcomes),
        n_passed=n_passed,
        n_failed=len(outcomes) - n_passed,
        results=tuple(outcomes),
    )
